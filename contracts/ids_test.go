package contracts_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestValidID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"Z9", true},
		{"job_01-ABC", true},
		{"-", true},
		{"_", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"", false},
		{" ", false},
		{"a b", false},
		{" a", false},
		{"a\t", false},
		{"a\n", false},
		{"a.b", false},
		{".", false},
		{"*", false},
		{">", false},
		{"a*", false},
		{"a>", false},
		{"a/b", false},
		{"a\\b", false},
		{"a:b", false},
		{"é", false},
		{"job\u00e9", false},
		{"日本", false},
		{"a\x00", false},
		{"\xff", false},
		// 128 bytes but fewer characters: the limit is bytes, and non-ASCII is out anyway.
		{strings.Repeat("é", 64), false},
	} {
		require.Equal(t, tc.want, contracts.ValidID(tc.id), "ValidID(%q)", tc.id)
		err := contracts.ValidateID("session", tc.id)
		if tc.want {
			require.NoError(t, err, "ValidateID(%q)", tc.id)
			continue
		}
		requireInvalidInput(t, err)
		require.Contains(t, err.Error(), "session")
	}
}

func TestValidateIDMessages(t *testing.T) {
	t.Parallel()
	err := contracts.ValidateID("job id", "")
	require.EqualError(t, err, "invalid_input: job id is required")

	err = contracts.ValidateID("job id", "a b")
	require.ErrorContains(t, err, `job id "a b" is not a valid id`)

	// A long bad id is clipped in the message, so a hostile payload cannot
	// make error messages (and logs) arbitrarily large.
	long := strings.Repeat("*", 10000)
	err = contracts.ValidateID("job id", long)
	requireInvalidInput(t, err)
	require.Less(t, len(err.Error()), 300)
}

func TestValidTool(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tool string
		want bool
	}{
		{"exec", true},
		{"code_execution", true},
		{"code_mode.exec", true},
		{"code_mode.wait", true},
		{"mcp.github.create-issue", true},
		{"a.b.c.d", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("ab.", 42) + "ab", true}, // 128 bytes
		{strings.Repeat("a", 129), false},
		{strings.Repeat("ab.", 42) + "abc", false}, // 129 bytes
		{"", false},
		{".", false},
		{".exec", false},
		{"exec.", false},
		{"a..b", false},
		{"a b", false},
		{"exec ", false},
		{"*", false},
		{">", false},
		{"mcp.*", false},
		{"mcp.>", false},
		{"a/b", false},
		{"é", false},
		{"code_mode.exé", false},
	} {
		require.Equal(t, tc.want, contracts.ValidTool(tc.tool), "ValidTool(%q)", tc.tool)
		err := contracts.ValidateTool(tc.tool)
		if tc.want {
			require.NoError(t, err, "ValidateTool(%q)", tc.tool)
			continue
		}
		requireInvalidInput(t, err)
		require.Contains(t, err.Error(), "tool")
	}
}

func TestJobValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*contracts.Job)
		field string // in the message when invalid; "" when valid
	}{
		{"full", func(*contracts.Job) {}, ""},
		{"no parent, no meta", func(j *contracts.Job) { j.Parent, j.Meta = nil, nil }, ""},
		{"bad id", func(j *contracts.Job) { j.ID = "a.b" }, "job id"},
		{"bad tool", func(j *contracts.Job) { j.Tool = "a..b" }, "tool"},
		{"bad session", func(j *contracts.Job) { j.Session = "" }, "session"},
		{"bad run id", func(j *contracts.Job) { j.Parent.RunID = "*" }, "parent.run_id"},
		{"bad call id", func(j *contracts.Job) { j.Parent.CallID = "" }, "parent.call_id"},
		{"call token", func(j *contracts.Job) { j.Parent.Token = "AAAAAAAAAAAAAAAAAAAAAA" }, ""},
		{"bad call token", func(j *contracts.Job) { j.Parent.Token = "a.b" }, "parent.token"},
		{"long call token", func(j *contracts.Job) { j.Parent.Token = strings.Repeat("a", contracts.MaxIDLength+1) }, "parent.token"},
		{"negative timeout", func(j *contracts.Job) { j.TimeoutMs = -1 }, "timeout_ms"},
		{"long timeout", func(j *contracts.Job) { j.TimeoutMs = contracts.MaxJobTimeout.Milliseconds() + 1 }, "timeout_ms"},
		{"negative attempts", func(j *contracts.Job) { j.MaxAttempts = -1 }, "max_attempts"},
		{"many attempts", func(j *contracts.Job) { j.MaxAttempts = contracts.MaxAttemptsLimit + 1 }, "max_attempts"},
		{"empty meta key", func(j *contracts.Job) { j.Meta = map[string]string{"": "v"} }, "meta"},
		{"long meta value", func(j *contracts.Job) { j.Meta = map[string]string{"k": strings.Repeat("é", 129)} }, "meta"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := fullJob()
			tc.edit(j)
			err := j.Validate()
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			requireInvalidInput(t, err)
			require.ErrorContains(t, err, tc.field)
		})
	}
}
