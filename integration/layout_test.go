package integration

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/toolq/toolq"

// goList runs `go list` with args (the go command from PATH) and returns its
// output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "the layout tests need the go command on PATH")
	cmd := exec.Command(gobin, append([]string{"list"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "go list %s: %s", strings.Join(args, " "), stderr.String())
	return strings.Split(strings.TrimSpace(stdout.String()), "\n")
}

// pkgImports maps each package of the patterns, and each of their
// dependencies, to the packages it imports.
func pkgImports(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, line := range goList(t, append([]string{"-deps", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}"}, patterns...)...) {
		pkg, imports, _ := strings.Cut(line, ":")
		out[pkg] = strings.Fields(imports)
	}
	return out
}

// importers lists the packages of graph that import pkg directly, to show
// how a forbidden package got in.
func importers(graph map[string][]string, pkg string) []string {
	var out []string
	for p, imps := range graph {
		if slices.Contains(imps, pkg) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// TestRequesterNeedsNoEngine: a requester imports producer and contracts;
// neither may pull in an engine (wazero, mvdan/sh) nor any toolq package
// but contracts, producer and the shared plumbing under internal/.
func TestRequesterNeedsNoEngine(t *testing.T) {
	t.Parallel()
	graph := pkgImports(t, module+"/producer", module+"/contracts")
	require.Contains(t, graph, module+"/producer")
	forbidden := func(pkg string) bool {
		if strings.HasPrefix(pkg, "github.com/tetratelabs/wazero") || strings.HasPrefix(pkg, "mvdan.cc/sh") {
			return true
		}
		rest, ok := strings.CutPrefix(pkg, module+"/")
		return ok && rest != "contracts" && rest != "producer" && !strings.HasPrefix(rest, "internal/")
	}
	// Report where the graph first crosses into forbidden packages, not
	// everything behind them.
	var offending []string
	for pkg := range graph {
		if !forbidden(pkg) {
			continue
		}
		via := slices.DeleteFunc(importers(graph, pkg), forbidden)
		if len(via) > 0 {
			offending = append(offending, pkg+" (imported by "+strings.Join(via, ", ")+")")
		}
	}
	slices.Sort(offending)
	require.Empty(t, offending, "producer and contracts must not depend on these")
}

// TestContractsImportsOnlyStdlib: contracts is the bottom of the graph.
func TestContractsImportsOnlyStdlib(t *testing.T) {
	t.Parallel()
	var offending []string
	for _, line := range goList(t, "-deps", "-f", "{{.ImportPath}} {{.Standard}}", module+"/contracts") {
		pkg, std, _ := strings.Cut(line, " ")
		if std != "true" && pkg != module+"/contracts" {
			offending = append(offending, pkg)
		}
	}
	require.Empty(t, offending, "contracts must import only the standard library")
}

// TestInternalImportsOnlyContracts: the shared plumbing under internal/
// (and its tests) depends on no toolq package but contracts and other
// internal/ packages, so every top-level package may use it.
func TestInternalImportsOnlyContracts(t *testing.T) {
	t.Parallel()
	var offending []string
	lines := goList(t, "-f", "{{.ImportPath}}:{{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", module+"/internal/...")
	require.NotEmpty(t, lines)
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, ":")
		for _, imp := range strings.Fields(imports) {
			rest, ok := strings.CutPrefix(imp, module+"/")
			if ok && rest != "contracts" && !strings.HasPrefix(rest, "internal/") {
				offending = append(offending, pkg+" imports "+imp)
			}
		}
	}
	slices.Sort(offending)
	require.Empty(t, offending)
}

// TestCoreNamesNoMetricsLibrary: the runtime, the tool packs and the
// scheduler offer Observer hooks; only package metrics (and the binary)
// import Prometheus.
func TestCoreNamesNoMetricsLibrary(t *testing.T) {
	t.Parallel()
	graph := pkgImports(t, module+"/worker", module+"/producer", module+"/scheduler", module+"/tools/...")
	require.Contains(t, graph, module+"/worker")
	var offending []string
	for pkg := range graph {
		if strings.HasPrefix(pkg, "github.com/prometheus/") {
			offending = append(offending, pkg+" (imported by "+strings.Join(importers(graph, pkg), ", ")+")")
		}
	}
	slices.Sort(offending)
	require.Empty(t, offending, "only package metrics may import Prometheus")
	require.Contains(t, pkgImports(t, module+"/metrics"), "github.com/prometheus/client_golang/prometheus")
}

// TestCoreNamesNoTracingLibrary: the worker, the tool packs, the scheduler
// and the producer expose tracing hooks (worker.Tracer, scheduler.Tracer)
// and name no tracing library; package tracing implements them with
// OpenTelemetry, and only it (with its otlptest receiver) and cmd import
// OpenTelemetry directly.
func TestCoreNamesNoTracingLibrary(t *testing.T) {
	t.Parallel()
	otel := func(pkg string) bool {
		return strings.HasPrefix(pkg, "go.opentelemetry.io/")
	}
	core := pkgImports(t, module+"/worker", module+"/producer", module+"/scheduler", module+"/tools/...",
		module+"/metrics", module+"/sandbox", module+"/shell", module+"/contracts")
	require.Contains(t, core, module+"/worker")
	var offending []string
	for pkg := range core {
		if otel(pkg) {
			offending = append(offending, pkg+" (imported by "+strings.Join(importers(core, pkg), ", ")+")")
		}
	}
	slices.Sort(offending)
	require.Empty(t, offending, "only package tracing and cmd may import OpenTelemetry")

	all := pkgImports(t, module+"/...")
	offending = nil
	for pkg, imps := range all {
		rest, ok := strings.CutPrefix(pkg, module+"/")
		if !ok || rest == "tracing" || strings.HasPrefix(rest, "tracing/") || strings.HasPrefix(rest, "cmd/") {
			continue
		}
		for _, imp := range imps {
			if otel(imp) {
				offending = append(offending, pkg+" imports "+imp)
			}
		}
	}
	slices.Sort(offending)
	require.Empty(t, offending, "only package tracing and cmd may import OpenTelemetry")
	// tracing itself builds on the hooks, never on an engine or a tool pack.
	for _, imp := range all[module+"/tracing"] {
		if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
			require.Contains(t, []string{"contracts", "worker", "scheduler"}, rest, "tracing imports %s", imp)
		}
	}
	require.Contains(t, all[module+"/tracing"], "go.opentelemetry.io/otel/sdk/trace")
}

// TestExamplesAreRequesters: the programs under examples/ use what a user
// of toolq would: contracts, producer and scheduler (the asynq ingress's
// payload), never internal/ nor an engine or a tool pack; only their tests
// assemble a worker (examples/internal/exampletest) and start servers
// (internal/testutil).
func TestExamplesAreRequesters(t *testing.T) {
	t.Parallel()
	lines := goList(t, "-f", "{{.ImportPath}} {{.Name}}:{{join .Imports \" \"}}", module+"/examples/...")
	allowed := []string{"contracts", "producer", "scheduler"}
	var mains []string
	var offending []string
	for _, line := range lines {
		head, imports, _ := strings.Cut(line, ":")
		pkg, name, _ := strings.Cut(head, " ")
		if name != "main" {
			continue
		}
		mains = append(mains, pkg)
		for _, imp := range strings.Fields(imports) {
			rest, ok := strings.CutPrefix(imp, module+"/")
			if ok && !slices.Contains(allowed, rest) {
				offending = append(offending, pkg+" imports "+imp)
			}
		}
	}
	require.GreaterOrEqual(t, len(mains), 3, "the examples are package main")
	slices.Sort(offending)
	require.Empty(t, offending)
}
