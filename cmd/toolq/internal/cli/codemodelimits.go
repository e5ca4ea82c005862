package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"

	"github.com/toolq/toolq/contracts"
)

// codeModeLimits is --codemode-limits: a run's defaults on this worker and
// the most a job may ask for, each field as in a job's limits.
type codeModeLimits struct {
	Defaults contracts.CodeModeLimits `json:"defaults"`
	Max      contracts.CodeModeLimits `json:"max"`
}

// parseCodeModeLimits reads --codemode-limits: inline JSON, @file or a
// file path. Unknown fields and negative values are refused; the code-mode
// config checks the rest (a default above the maximum, say) at start.
func parseCodeModeLimits(arg string) (*codeModeLimits, error) {
	data := []byte(strings.TrimSpace(arg))
	if !bytes.HasPrefix(data, []byte("{")) {
		b, err := os.ReadFile(strings.TrimPrefix(arg, "@")) //nolint:gosec // G304: the operator names the limits file
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--codemode-limits takes inline JSON, @file or a file path: %v", err)
		}
		data = b
	}
	var l codeModeLimits
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--codemode-limits: %v", err)
	}
	if dec.More() {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--codemode-limits: one JSON object")
	}
	def, maxes := fieldsOf(l.Defaults), fieldsOf(l.Max)
	for name, v := range def {
		if v < 0 || maxes[name] < 0 {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--codemode-limits: %s must not be negative", name)
		}
		if m := maxes[name]; m > 0 && v > m {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--codemode-limits: defaults.%s %d above max.%s %d", name, v, name, m)
		}
	}
	for name, v := range maxes {
		if v < 0 {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--codemode-limits: %s must not be negative", name)
		}
	}
	return &l, nil
}

// fieldsOf is l's fields by JSON name (every field is a count).
func fieldsOf(l contracts.CodeModeLimits) map[string]int64 {
	data, _ := json.Marshal(l)
	var out map[string]int64
	_ = json.Unmarshal(data, &out)
	return out
}
