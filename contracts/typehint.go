package contracts

import (
	"encoding/json"
	"sort"
	"strings"
)

// TypeHint renders a JSON Schema as a compact TypeScript-like hint, such as
// "{ ms: number }", as a code-mode guest's ALL_TOOLS entries and the
// models' quick index of the catalog show them: "" when
// there is no schema, "unknown" for anything it does not describe.
func TypeHint(schema json.RawMessage) string {
	if len(schema) == 0 {
		return ""
	}
	var s map[string]any
	if json.Unmarshal(schema, &s) != nil {
		return "unknown"
	}
	return hint(s, 0)
}

func hint(s map[string]any, depth int) string {
	if depth > 3 {
		return "unknown"
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		parts := make([]string, 0, len(e))
		for _, v := range e {
			b, _ := json.Marshal(v)
			parts = append(parts, string(b))
		}
		return strings.Join(parts, " | ")
	}
	switch s["type"] {
	case "string":
		return "string"
	case "integer", "number":
		return "number"
	case "boolean":
		return "boolean"
	case "null":
		return "null"
	case "array":
		if items, ok := s["items"].(map[string]any); ok {
			return hint(items, depth+1) + "[]"
		}
		return "unknown[]"
	case "object":
		props, _ := s["properties"].(map[string]any)
		if len(props) == 0 {
			return "object"
		}
		req := map[string]bool{}
		if r, ok := s["required"].([]any); ok {
			for _, v := range r {
				if n, ok := v.(string); ok {
					req[n] = true
				}
			}
		}
		names := make([]string, 0, len(props))
		for n := range props {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, 0, len(names))
		for _, n := range names {
			p, _ := props[n].(map[string]any)
			opt := "?"
			if req[n] {
				opt = ""
			}
			parts = append(parts, n+opt+": "+hint(p, depth+1))
		}
		return "{ " + strings.Join(parts, "; ") + " }"
	}
	return "unknown"
}
