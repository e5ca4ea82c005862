package integration

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocsHaveNoConflictMarkers fails on a merge left half-done in any
// Markdown file of the repository: a conflict once reached DESIGN.md's
// layout table and rendered as two versions of one row.
func TestDocsHaveNoConflictMarkers(t *testing.T) {
	t.Parallel()
	var bad []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		f, err := os.Open(filepath.Clean(path)) //nolint:gosec // G304: the repository's own files, found by the walk
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(line, "<<<<<<< ") || strings.HasPrefix(line, ">>>>>>> ") || line == "=======" {
				bad = append(bad, path+":"+strings.TrimSpace(line))
			}
		}
		return sc.Err()
	})
	require.NoError(t, err)
	require.Empty(t, bad, "merge conflict markers left in documentation")
}
