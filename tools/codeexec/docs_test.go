package codeexec_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
)

// TestDocsPageExists: the missing-credentials payload points at a page of
// this repository, and the page documents every field of the input and of
// the providers config file.
func TestDocsPageExists(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", codeexec.DocsPath+".md"))
	require.NoError(t, err, "the page %s.md the missing-credentials error points at", codeexec.DocsPath)
	text := string(page)
	for _, typ := range []reflect.Type{
		reflect.TypeFor[contracts.CodeExecutionInput](), reflect.TypeFor[codeexec.Config](),
		reflect.TypeFor[codeexec.ProviderConfig](), reflect.TypeFor[codeexec.RetryConfig](),
		reflect.TypeFor[codeexec.BreakerConfig](),
	} {
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			documented := regexp.MustCompile("[`.]" + regexp.QuoteMeta(name) + "[`.]").MatchString(text)
			require.True(t, documented, "%s.%s (%q) is not documented in %s.md", typ.Name(), typ.Field(i).Name, name, codeexec.DocsPath)
		}
	}
	for _, p := range []string{codeexec.XAI, codeexec.OpenAI, codeexec.Gemini, codeexec.Anthropic} {
		require.Contains(t, text, "`"+p+"`", "provider %s is not documented", p)
	}
}
