package contracts_test

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestDecodeExecInput(t *testing.T) {
	t.Parallel()
	in, err := contracts.DecodeExecInput([]byte(`{"command":"ls -l","env":{"LANG":"C"}}`))
	require.NoError(t, err)
	require.Equal(t, contracts.ExecHostSandbox, in.Host)
	require.Equal(t, contracts.ExecDefaultTimeoutSeconds, in.Timeout)
	require.Equal(t, contracts.ExecDefaultYieldMs, *in.YieldMs)
	require.Equal(t, 30*time.Minute, in.TimeoutDuration())

	for name, doc := range map[string]string{
		"empty":           ``,
		"null":            `null`,
		"no command":      `{"workdir":"/tmp"}`,
		"unknown field":   `{"command":"ls","cwd":"/"}`,
		"trailing data":   `{"command":"ls"} {}`,
		"relative dir":    `{"command":"ls","workdir":"tmp"}`,
		"bad env name":    `{"command":"ls","env":{"1A":"x"}}`,
		"bad host":        `{"command":"ls","host":"cloud"}`,
		"bad security":    `{"command":"ls","security":"lax"}`,
		"bad ask":         `{"command":"ls","ask":"sometimes"}`,
		"timeout too big": `{"command":"ls","timeout":86401}`,
		"negative yield":  `{"command":"ls","yieldMs":-1}`,
		"pty":             `{"command":"ls","pty":true}`,
		"node":            `{"command":"ls","node":"n1"}`,
		"too large":       `{"command":"` + strings.Repeat("x", contracts.ExecMaxInputBytes) + `"}`,
	} {
		_, err := contracts.DecodeExecInput([]byte(doc))
		require.ErrorIs(t, err, contracts.ErrInvalidInput, name)
	}
}

// TestExecWireNames pins the JSON names of the exec types and the two
// canonical encodings that signatures and approvals depend on.
func TestExecWireNames(t *testing.T) {
	t.Parallel()
	plan := contracts.ExecPlan{
		Command: "ls -l", Script: "/bin/ls -l", Shell: "/bin/sh", Argv: [][]string{{"/bin/ls", "-l"}},
		Workdir: "/w", Env: map[string]string{"B": "2", "A": "1"}, Path: []string{"/bin"},
		Host: contracts.ExecHostSandbox, TimeoutMs: 1000,
	}
	// A change of either value breaks every approval and signature in flight.
	require.Equal(t, "b78c8581d074ff632a675e848367383cab26fe45023cff2fda49379d33cec41a", plan.Hash())
	d := contracts.ExecDecision{
		ApprovalID: "a1", Hash: "h", Verdict: contracts.ExecApprove, Always: true, Reason: "ok",
		Approver: "UABC", IssuedAt: time.Unix(1, 2).UTC(), Nonce: "n", Signature: "ignored",
	}
	require.Equal(t, "16746f6f6c712e657865632e6465636973696f6e2e7631026131016807617070726f76650474727565026f6b04554142430a31303030303030303032016e",
		hex.EncodeToString(d.SigningPayload()))
	// A named tenant's decision is v2: the tenant is signed too.
	dt := d
	dt.Tenant = "ACME"
	require.Equal(t, "16746f6f6c712e657865632e6465636973696f6e2e76320441434d45026131016807617070726f76650474727565026f6b04554142430a31303030303030303032016e",
		hex.EncodeToString(dt.SigningPayload()))
	require.Equal(t, "ACME.a1", contracts.ExecApprovalKey("ACME", "a1"))
	require.Equal(t, "a1", contracts.ExecApprovalKey("", "a1"))

	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := contracts.ExecApprovalRecord{
		Approval: contracts.ExecApproval{
			ID: "j1", Session: "s1", JobID: "j1", Plan: plan, Reason: "r", Misses: []string{"m"}, Unlisted: []string{"/bin/ls"},
			CreatedAt: at, ExpiresAt: at, Hash: plan.Hash(),
		},
		Tool: contracts.ToolExec, Background: true, Status: contracts.ExecApprovalApproved,
		Decision: &d, DecideJob: "dj", DecidedAt: at,
	}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	require.JSONEq(t, `{"approval":{"id":"j1","session":"s1","jobId":"j1",
		"plan":{"command":"ls -l","script":"/bin/ls -l","shell":"/bin/sh","argv":[["/bin/ls","-l"]],"workdir":"/w",
			"env":{"A":"1","B":"2"},"path":["/bin"],"host":"sandbox","timeoutMs":1000},
		"reason":"r","misses":["m"],"unlisted":["/bin/ls"],"createdAt":"2025-01-02T03:04:05Z","expiresAt":"2025-01-02T03:04:05Z",
		"hash":"b78c8581d074ff632a675e848367383cab26fe45023cff2fda49379d33cec41a"},
		"tool":"exec","background":true,"status":"approved",
		"decision":{"approvalId":"a1","hash":"h","verdict":"approve","always":true,"reason":"ok","approver":"UABC",
			"issuedAt":"1970-01-01T00:00:01.000000002Z","nonce":"n","signature":"ignored"},
		"decideJob":"dj","decidedAt":"2025-01-02T03:04:05Z"}`, string(b))

	// An undecided record has no decidedAt.
	b, err = json.Marshal(contracts.ExecApprovalRecord{Status: contracts.ExecApprovalPending})
	require.NoError(t, err)
	require.NotContains(t, string(b), "decidedAt")

	b, err = json.Marshal(contracts.ExecResult{ExitCode: 1, Stdout: "o", Stderr: "e", StdoutTruncated: true, StderrTruncated: true, DurationMs: 5, TimedOut: true, Signal: "KILL"})
	require.NoError(t, err)
	require.JSONEq(t, `{"exitCode":1,"stdout":"o","stderr":"e","stdoutTruncated":true,"stderrTruncated":true,"durationMs":5,"timedOut":true,"signal":"KILL"}`, string(b))

	b, err = json.Marshal(contracts.ExecPendingResult{
		ApprovalID: "a", Command: "c", Argv: [][]string{{"x"}}, Workdir: "/w", Host: contracts.ExecHostWorker,
		Reason: "r", Misses: []string{"m"}, Unlisted: []string{"u"}, Background: true, ExpiresAt: at, Hash: "h",
		Env: map[string]string{"LANG": "C"}, TimeoutMs: 1000,
	})
	require.NoError(t, err)
	require.JSONEq(t, `{"approvalId":"a","command":"c","argv":[["x"]],"workdir":"/w","host":"worker","reason":"r","misses":["m"],
		"unlisted":["u"],"background":true,"expiresAt":"2025-01-02T03:04:05Z","hash":"h","env":{"LANG":"C"},"timeoutMs":1000}`, string(b))

	b, err = json.Marshal(contracts.ExecDecideResult{ApprovalID: "a", Applied: true, Status: "approved", JobID: "j", Session: "s"})
	require.NoError(t, err)
	require.JSONEq(t, `{"approvalId":"a","applied":true,"status":"approved","jobId":"j","session":"s"}`, string(b))
}

func TestExecSessionID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "job-1-bg", contracts.ExecSessionID("job-1"))
	require.Equal(t, "job-1", contracts.ExecApprovalID("job-1"))
	long := contracts.ExecSessionID(strings.Repeat("j", contracts.MaxIDLength))
	require.True(t, contracts.ValidID(long), long)
	require.True(t, strings.HasSuffix(long, "-bg"))
}
