package cli

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
)

const repoRoot = "../../../.."

// TestReadmeCodeExecutionExample: the file the README's cron example
// submits exists and is a valid code_execution input, read the way
// `--input @FILE` reads it; the docs page shows the same file.
func TestReadmeCodeExecutionExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`--tool code_execution[ \\\n]*--input @(\S+)`).FindSubmatch(readme)
	require.NotNil(t, m, "the README's code_execution schedule example is gone")
	file := string(m[1])
	raw, err := readInput("@"+filepath.Join(repoRoot, file), strings.NewReader(""))
	require.NoError(t, err)
	in, err := contracts.DecodeCodeExecutionInput(raw)
	require.NoError(t, err, "%s is not a valid code_execution input", file)
	require.NotEmpty(t, in.Task)

	page, err := os.ReadFile(filepath.Join(repoRoot, codeexec.DocsPath+".md"))
	require.NoError(t, err)
	require.Contains(t, string(page), "@"+file, "the docs page runs the README's file")
	require.Contains(t, string(page), strings.TrimSpace(string(readFile(t, file))), "the docs page shows %s as it is", file)
}

// TestProvidersConfigExample: the documented providers config file is read
// by --providers-config and accepted by the code_execution tool.
func TestProvidersConfigExample(t *testing.T) {
	t.Parallel()
	const file = "examples/code_execution/providers.json"
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	cfg, err := codeExecConfig(g, func(string, []byte) error { return nil }, filepath.Join(repoRoot, file))
	require.NoError(t, err)
	require.Equal(t, "xai", cfg.DefaultProvider)
	require.Equal(t, "grok-4.6", cfg.Providers["xai"].Model)
	require.False(t, *cfg.Providers["anthropic"].Enabled)
	cfg.Getenv = func(string) string { return "" }
	_, err = codeexec.NewCodeExecution(cfg)
	require.NoError(t, err)

	page, err := os.ReadFile(filepath.Join(repoRoot, codeexec.DocsPath+".md"))
	require.NoError(t, err)
	require.Contains(t, string(page), strings.TrimSpace(string(readFile(t, file))), "the docs page shows %s as it is", file)

	// A typo is refused, not ignored.
	bad := filepath.Join(t.TempDir(), "p.json")
	var doc map[string]any
	require.NoError(t, json.Unmarshal(readFile(t, file), &doc))
	doc["defaultProvidr"] = "xai"
	data, err := json.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bad, data, 0o600))
	_, err = codeExecConfig(g, func(string, []byte) error { return nil }, bad)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel)) //nolint:gosec // G304: a file of this repository
	require.NoError(t, err)
	return b
}
