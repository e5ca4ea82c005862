package contracts_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestTypeHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ schema, want string }{
		{``, ``},
		{`not json`, `unknown`},
		{`{"type":"string"}`, `string`},
		{`{"type":"integer"}`, `number`},
		{`{"enum":["a",1]}`, `"a" | 1`},
		{`{"type":"array","items":{"type":"boolean"}}`, `boolean[]`},
		{`{"type":"array"}`, `unknown[]`},
		{`{"type":"object"}`, `object`},
		{`{"type":"object","properties":{"ms":{"type":"number"},"a":{"type":"string"}},"required":["ms"]}`, `{ a?: string; ms: number }`},
		{`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"object","properties":{"d":{"type":"string"}}}}}}}}}`, `{ a?: { b?: { c?: { d?: unknown } } } }`},
		{`{"oneOf":[{"type":"string"}]}`, `unknown`},
	} {
		require.Equal(t, tc.want, contracts.TypeHint(json.RawMessage(tc.schema)), tc.schema)
	}
}
