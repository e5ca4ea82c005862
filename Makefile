# toolq — run `make help` for the targets.
SHELL := /bin/bash
GO ?= go
PKGS := ./...
# deploy/ is a module of its own: the tests of the image, chart and compose
# file bring Helm, the Kubernetes types, BuildKit and compose-go, none of
# which belongs in the binary's module graph.
DEPLOY := deploy
TEST_TIMEOUT ?= 25m

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_\/-]+:.*##/ { printf "  %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: wasm
wasm: ## Fetch the pinned, sha256-verified quickjs.wasm (npm quickjs-wasi 3.7.0)
	@bash scripts/fetch-quickjs.sh

.PHONY: build
build: wasm ## Build bin/toolq
	$(GO) build -o bin/toolq ./cmd/toolq

.PHONY: nats-server
nats-server: ## Build bin/nats-server from the nats-server module version go.mod pins (for bench --cluster-server)
	$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2

.PHONY: dev
dev: build ## Run toolq dev: embedded NATS + a worker with every tool, and a self-check job
	@# the binary itself, not `go run`, which exits 1 after Ctrl-C and makes make print an error
	bin/toolq dev

.PHONY: test
test: wasm ## Run the whole test suite with the race detector (what CI runs)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	@# the deploy tests parse and render files and start no goroutines of
	@# ours: without -race, their Helm/Kubernetes build is minutes shorter
	cd $(DEPLOY) && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

.PHONY: test/race
test/race: test ## Same as test

.PHONY: test/fast
test/fast: wasm ## Run the whole test suite without the race detector
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	cd $(DEPLOY) && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

.PHONY: test/deploy
test/deploy: ## Run only the deploy artefacts' tests (Dockerfile, Helm chart, compose file)
	cd $(DEPLOY) && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

.PHONY: bench
bench: wasm ## Run the Go benchmarks and `toolq bench` (end-to-end figures)
	$(GO) test -run '^$$' -bench . -benchtime 1x ./... 
	$(GO) run ./cmd/toolq bench

GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(shell $(GO) env GOPATH)/bin/golangci-lint

.PHONY: lint
lint: ## Run go vet and golangci-lint (installs the pinned version when missing)
	$(GO) vet $(PKGS)
	@$(GOLANGCI_LINT) version 2>/dev/null | grep -q "$(GOLANGCI_LINT_VERSION:v%=%)" || \
		$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	$(GOLANGCI_LINT) run ./...
	cd $(DEPLOY) && $(GO) vet ./... && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...

.PHONY: tidy
tidy: ## Tidy go.mod and go.sum (and deploy's)
	$(GO) mod tidy
	cd $(DEPLOY) && $(GO) mod tidy
