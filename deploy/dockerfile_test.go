package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"github.com/stretchr/testify/require"
)

// wasmDir is where scripts/fetch-quickjs.sh installs quickjs.wasm and
// where go:embed reads it (sandbox/internal/engine/embed.go).
const wasmDir = "sandbox/internal/engine/wasm"

// parseDockerfile parses with BuildKit's parser and instructions, the
// linter's warnings collected as errors.
func parseDockerfile(src []byte) ([]instructions.Stage, error) {
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	var warnings []string
	for _, w := range res.Warnings {
		warnings = append(warnings, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, _ []parser.Range) {
		warnings = append(warnings, rule+": "+msg)
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return nil, err
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("warnings: %s", strings.Join(warnings, "; "))
	}
	return stages, nil
}

// tb is what the image checks need of a test: a *testing.T, or a recorder
// that tells whether a broken Dockerfile fails them.
type tb interface {
	require.TestingT
	Helper()
}

// recorder is a tb that records a failure and ends the check there.
type recorder struct{ failed bool }

func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) FailNow()              { r.failed = true; runtime.Goexit() }
func (r *recorder) Helper()               {}

// fails runs check on its own goroutine (FailNow ends it) and waits for it.
func fails(check func(tb)) bool {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.failed
}

func stage(t tb, stages []instructions.Stage, name string) instructions.Stage {
	t.Helper()
	i, ok := instructions.HasStage(stages, name)
	require.True(t, ok, "no stage %s", name)
	return stages[i]
}

func commands[T instructions.Command](s instructions.Stage) []T {
	var out []T
	for _, c := range s.Commands {
		if v, ok := c.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// index returns the position in s of the first command for which match is true.
func index(s instructions.Stage, match func(instructions.Command) bool) int {
	return slices.IndexFunc(s.Commands, match)
}

func runs(sub string) func(instructions.Command) bool {
	return func(c instructions.Command) bool {
		r, ok := c.(*instructions.RunCommand)
		return ok && strings.Contains(strings.Join(r.CmdLine, " "), sub)
	}
}

func copiesFrom(from, dst string) func(instructions.Command) bool {
	return func(c instructions.Command) bool {
		cp, ok := c.(*instructions.CopyCommand)
		return ok && cp.From == from && strings.TrimSuffix(cp.DestPath, "/") == dst
	}
}

// checkImage asserts what the image needs, stage by stage.
func checkImage(t tb, stages []instructions.Stage) {
	t.Helper()
	require.Equal(t, []string{"wasm", "build", "slim", "toolq"}, stageNames(stages))

	// wasm: the pinned fetch, which checks both sha256 sums.
	w := stage(t, stages, "wasm")
	require.GreaterOrEqual(t, index(w, runs("bash scripts/fetch-quickjs.sh")), 0, "the wasm stage runs the fetch")
	require.Less(t, index(w, func(c instructions.Command) bool {
		cp, ok := c.(*instructions.CopyCommand)
		return ok && slices.Contains(cp.SourcePaths, "scripts/fetch-quickjs.sh")
	}), index(w, runs("fetch-quickjs.sh")))

	// build: the wasm in place and verified again before go build.
	b := stage(t, stages, "build")
	cp := index(b, copiesFrom("wasm", wasmDir))
	verify := index(b, runs("bash scripts/fetch-quickjs.sh"))
	build := index(b, runs("go build"))
	require.GreaterOrEqual(t, cp, 0, "build copies the wasm from the wasm stage into %s", wasmDir)
	require.Greater(t, verify, cp, "build verifies the wasm after copying it")
	require.Greater(t, build, verify, "build compiles after the verification")
	gb := b.Commands[build].(*instructions.RunCommand)
	line := strings.Join(gb.CmdLine, " ")
	require.Contains(t, line, "CGO_ENABLED=0", "a static binary")
	require.Contains(t, line, "-o /out/toolq ./cmd/toolq")
	// COPY . . comes before the verification, or it would overwrite the wasm.
	require.Less(t, index(b, func(c instructions.Command) bool {
		cp, ok := c.(*instructions.CopyCommand)
		return ok && cp.From == "" && slices.Equal(cp.SourcePaths, []string{"."})
	}), cp)

	// The runtime stages: the binary, a non-root user, the entrypoint.
	for _, name := range []string{"slim", "toolq"} {
		s := stage(t, stages, name)
		require.GreaterOrEqual(t, index(s, copiesFrom("build", "/usr/local/bin/toolq")), 0, "%s copies the binary", name)
		users := commands[*instructions.UserCommand](s)
		require.NotEmpty(t, users, "%s sets a user", name)
		user := users[len(users)-1].User
		uid, _, _ := strings.Cut(user, ":")
		n, err := strconv.Atoi(uid)
		require.NoError(t, err, "%s: a numeric uid lets Kubernetes check runAsNonRoot", name)
		require.NotZero(t, n, "%s runs as root", name)
		require.Equal(t, 65532, n, "%s: the uid the chart's securityContext names", name)
		eps := commands[*instructions.EntrypointCommand](s)
		require.Len(t, eps, 1)
		require.Equal(t, []string{"/usr/local/bin/toolq"}, eps[0].CmdLine)
		require.False(t, eps[0].PrependShell, "%s: exec form, no shell", name)
	}
	require.True(t, strings.HasPrefix(stage(t, stages, "slim").BaseName, "gcr.io/distroless/static"), "slim has no shell")

	// The default (last) stage runs exec: bubblewrap and the policy's shell.
	last := stages[len(stages)-1]
	require.Equal(t, "toolq", last.Name)
	apt := index(last, runs("apt-get install"))
	require.GreaterOrEqual(t, apt, 0)
	install := strings.Fields(strings.Join(last.Commands[apt].(*instructions.RunCommand).CmdLine, " "))
	require.Contains(t, install, "bubblewrap")
	require.Contains(t, install, "bash")
	require.Contains(t, install, "--no-install-recommends")
	require.Less(t, apt, index(last, func(c instructions.Command) bool { _, ok := c.(*instructions.UserCommand); return ok }),
		"packages are installed before dropping root")
}

func stageNames(stages []instructions.Stage) []string {
	var out []string
	for _, s := range stages {
		out = append(out, s.Name)
	}
	return out
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	src := readFile(t, "Dockerfile")
	stages, err := parseDockerfile(src)
	require.NoError(t, err)
	checkImage(t, stages)

	// What the stages name exists in the repository: the script, the
	// folder it installs to, the command the build compiles.
	script := readFile(t, "../scripts/fetch-quickjs.sh")
	require.Contains(t, string(script), `dest="${root}/`+wasmDir+`"`)
	_, err = os.Stat("../cmd/toolq/main.go")
	require.NoError(t, err)
	require.Contains(t, string(readFile(t, "../"+wasmDir+"/../embed.go")), "//go:embed wasm")
}

// TestDockerfileBreaks checks that checkImage fails on a Dockerfile that
// lost what the image needs.
func TestDockerfileBreaks(t *testing.T) {
	t.Parallel()
	src := string(readFile(t, "Dockerfile"))
	for name, tc := range map[string]struct{ old, new string }{
		"root user":         {"USER 65532:65532\nWORKDIR", "USER root\nWORKDIR"},
		"no bubblewrap":     {"bubblewrap bash", "bash"},
		"no verification":   {"# npm here, so a file that does not match fails the build.\nRUN bash scripts/fetch-quickjs.sh\n", "\n"},
		"no fetch":          {"RUN bash scripts/fetch-quickjs.sh\n\nFROM golang", "\nFROM golang"},
		"binary not copied": {"COPY --from=build /out/toolq /usr/local/bin/toolq\nENV", "ENV"},
		"shell entrypoint":  {"ENTRYPOINT [\"/usr/local/bin/toolq\"]\nCMD [\"worker\"]\n\nFROM debian", "ENTRYPOINT /usr/local/bin/toolq\nCMD [\"worker\"]\n\nFROM debian"},
		"cgo":               {"CGO_ENABLED=0 ", ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, src, tc.old)
			broken := strings.Replace(src, tc.old, tc.new, 1)
			stages, err := parseDockerfile([]byte(broken))
			if err != nil {
				return // the parser or the linter refused it
			}
			require.True(t, fails(func(t tb) { checkImage(t, stages) }), "the checks pass on a Dockerfile with %s", name)
		})
	}
}

// TestDockerfileLint checks that BuildKit's linter runs: its warnings fail.
func TestDockerfileLint(t *testing.T) {
	t.Parallel()
	src := strings.Replace(string(readFile(t, "Dockerfile")), "AS wasm", "as wasm", 1)
	_, err := parseDockerfile([]byte(src))
	require.ErrorContains(t, err, "FromAsCasing")
}

// TestDockerignore checks the build context: what the stages copy is in
// it, the local wasm is not (the image fetches and verifies its own).
func TestDockerignore(t *testing.T) {
	t.Parallel()
	f, err := os.Open("Dockerfile.dockerignore")
	require.NoError(t, err)
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	require.NoError(t, err)
	pm, err := patternmatcher.New(patterns)
	require.NoError(t, err)
	for _, p := range []string{"go.mod", "go.sum", "scripts/fetch-quickjs.sh", "cmd/toolq/main.go", wasmDir + "/README.md", wasmDir + "/LICENSE.quickjs-wasi", "contracts/schema/job.schema.json"} {
		ex, err := pm.MatchesOrParentMatches(filepath.FromSlash(p))
		require.NoError(t, err)
		require.False(t, ex, "%s is excluded from the build context", p)
	}
	for _, p := range []string{wasmDir + "/quickjs.wasm", ".git/config", "bin/toolq", "worker/worker_test.go"} {
		ex, err := pm.MatchesOrParentMatches(filepath.FromSlash(p))
		require.NoError(t, err)
		require.True(t, ex, "%s is in the build context", p)
	}
}
