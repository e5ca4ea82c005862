package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/tools/codeexec/provider"
)

func TestText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		build func(*provider.Text)
		want  string
	}{
		{"adjacent blocks concatenate", func(x *provider.Text) { x.Write("Mean: "); x.Write("42"); x.Write(". Verified.") }, "Mean: 42. Verified."},
		{"tool activity separates", func(x *provider.Text) { x.Write("I'll compute it."); x.Break(); x.Write("It is 42.") }, "I'll compute it.\n\nIt is 42."},
		{"existing whitespace kept", func(x *provider.Text) { x.Write("Computing. "); x.Break(); x.Write("It is 42.") }, "Computing. It is 42."},
		{"leading break ignored", func(x *provider.Text) { x.Break(); x.Write("42") }, "42"},
		{"empty blocks ignored", func(x *provider.Text) { x.Write("a"); x.Break(); x.Write(""); x.Write("b") }, "a\n\nb"},
	}
	for _, tc := range cases {
		var x provider.Text
		tc.build(&x)
		require.Equal(t, tc.want, x.String(), tc.name)
	}
}

func TestCitations(t *testing.T) {
	t.Parallel()
	var c provider.Citations
	require.Equal(t, []string{}, c.List())
	for _, u := range []string{"https://a.example/x", "HTTP://B.example", "mailto:x@y", "javascript:alert(1)", "https://", "https://a.example/x", " https://c.example/ ", "https://bad example"} {
		c.Add(u)
	}
	require.Equal(t, []string{"https://a.example/x", "HTTP://B.example", "https://c.example/"}, c.List())
}

func TestKindForStatus(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]provider.Kind{
		400: provider.KindBadRequest, 401: provider.KindAuth, 403: provider.KindAuth, 404: provider.KindBadRequest,
		408: provider.KindTransport, 422: provider.KindBadRequest, 429: provider.KindRateLimited,
		500: provider.KindServer, 503: provider.KindServer, 529: provider.KindServer,
	} {
		require.Equal(t, want, provider.KindForStatus(status), "status %d", status)
	}
}

func TestErrorIs(t *testing.T) {
	t.Parallel()
	err := &provider.Error{Provider: "xai", Kind: provider.KindRateLimited, Status: 429}
	require.ErrorIs(t, err, provider.ErrRateLimited)
	require.NotErrorIs(t, err, provider.ErrServer)
	require.True(t, err.Retryable())
	require.False(t, err.Fault())
	require.Equal(t, "xai: rate_limited (HTTP 429)", err.Error())
}
