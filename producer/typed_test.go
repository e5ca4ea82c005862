package producer_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

// enqueued reads back the last job published for tool, as a worker would
// receive it.
func (b *bundle) enqueued(t *testing.T, tool string) *contracts.Job {
	t.Helper()
	ctx := testutil.Context(t, 5*time.Second)
	st, err := b.js.Stream(ctx, contracts.Subjects{}.JobsStream())
	require.NoError(t, err)
	// On whichever session lane it went (contracts.SessionJob).
	var msg *jetstream.RawStreamMsg
	lanes := contracts.Subjects{}.TenantJobLanes("", tool, contracts.PriorityNormal)
	for _, subject := range lanes {
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		if msg == nil || m.Sequence > msg.Sequence {
			msg = m
		}
	}
	require.NotNil(t, msg, "no job of %s queued", tool)
	job, err := contracts.DecodeJob(msg.Data)
	require.NoError(t, err)
	return job
}

func TestTypedSubmits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 10*time.Second)

	job, err := b.prod.SubmitCode(ctx, &contracts.CodeModeExecInput{Code: "return 1", Tools: []string{}, AutoResume: true}, &producer.SubmitOpts{Session: "s1"})
	require.NoError(t, err)
	got := b.enqueued(t, contracts.ToolCodeModeExec)
	require.Equal(t, job.ID, got.ID)
	require.Equal(t, "s1", got.Session)
	require.JSONEq(t, `{"code":"return 1","tools":[],"autoResume":true}`, string(got.Input))

	_, err = b.prod.Wait(ctx, job.ID, &producer.SubmitOpts{Session: "s1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"runId":"`+job.ID+`"}`, string(b.enqueued(t, contracts.ToolCodeModeWait).Input))

	_, err = b.prod.SubmitExec(ctx, &contracts.ExecInput{Command: "ls -l", Host: contracts.ExecHostSandbox}, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"command":"ls -l","host":"sandbox"}`, string(b.enqueued(t, contracts.ToolExec).Input))

	_, err = b.prod.SubmitCodeExecution(ctx, &contracts.CodeExecutionInput{Task: "mean of 1 and 3", Provider: contracts.ProviderGemini}, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"task":"mean of 1 and 3","provider":"gemini"}`, string(b.enqueued(t, contracts.ToolCodeExecution).Input))

	// Bad inputs are refused before anything is published.
	for name, submit := range map[string]func() error{
		"nil code": func() error { _, err := b.prod.SubmitCode(ctx, nil, nil); return err },
		"no code":  func() error { _, err := b.prod.SubmitCode(ctx, &contracts.CodeModeExecInput{}, nil); return err },
		"bad language": func() error {
			_, err := b.prod.SubmitCode(ctx, &contracts.CodeModeExecInput{Code: "1", Language: "lua"}, nil)
			return err
		},
		"bad run id": func() error { _, err := b.prod.Wait(ctx, "run.1", nil); return err },
		"nil exec":   func() error { _, err := b.prod.SubmitExec(ctx, nil, nil); return err },
		"no command": func() error { _, err := b.prod.SubmitExec(ctx, &contracts.ExecInput{}, nil); return err },
		"relative dir": func() error {
			_, err := b.prod.SubmitExec(ctx, &contracts.ExecInput{Command: "ls", Workdir: "tmp"}, nil)
			return err
		},
		"nil task": func() error { _, err := b.prod.SubmitCodeExecution(ctx, nil, nil); return err },
		"unknown vendor": func() error {
			_, err := b.prod.SubmitCodeExecution(ctx, &contracts.CodeExecutionInput{Task: "t", Provider: "acme"}, nil)
			return err
		},
	} {
		require.ErrorIs(t, submit(), contracts.ErrInvalidInput, name)
	}
	st, err := b.js.Stream(ctx, contracts.Subjects{}.JobsStream())
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, info.State.Msgs, "only the four valid submits are enqueued")
}

func TestApprovalAndDecide(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 10*time.Second)

	_, err := b.prod.Approval(ctx, "nobody")
	require.ErrorIs(t, err, producer.ErrNoApproval, "no bucket yet")
	kv, err := bus.EnsureKV(ctx, b.js, jetstream.KeyValueConfig{Bucket: contracts.Subjects{}.ApprovalsBucket()})
	require.NoError(t, err)
	_, err = b.prod.Approval(ctx, "nobody")
	require.ErrorIs(t, err, producer.ErrNoApproval)
	_, err = b.prod.Approval(ctx, "a.b")
	require.ErrorIs(t, err, contracts.ErrInvalidInput)

	// A record as the exec worker writes it.
	now := time.Now().UTC().Truncate(time.Second)
	plan := contracts.ExecPlan{Command: "seq 3", Script: "/usr/bin/seq 3", Shell: "/bin/sh", Path: []string{"/usr/bin"}, Host: contracts.ExecHostSandbox, TimeoutMs: 1000}
	rec := contracts.ExecApprovalRecord{
		Approval: contracts.ExecApproval{ID: "job-1", Session: "p", JobID: "job-1", Plan: plan, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Hash: plan.Hash()},
		Tool:     contracts.ToolExec, Status: contracts.ExecApprovalPending,
	}
	data, err := json.Marshal(rec)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "job-1", data)
	require.NoError(t, err)
	got, err := b.prod.Approval(ctx, "job-1")
	require.NoError(t, err)
	require.Equal(t, rec, *got)

	// An approver signs with nkeys alone: no engine package is needed.
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	d := contracts.NewExecDecision(&got.Approval, contracts.ExecApprove, false, "looks fine", now)
	d.Approver, d.Nonce = pub, "n-1"
	_, err = b.prod.Decide(ctx, &d, nil)
	require.ErrorIs(t, err, contracts.ErrInvalidInput, "unsigned")
	sig, err := kp.Sign(d.SigningPayload())
	require.NoError(t, err)
	d.Signature = base64.RawURLEncoding.EncodeToString(sig)

	job, err := b.prod.Decide(ctx, &d, &producer.SubmitOpts{ID: "dj-1"})
	require.NoError(t, err)
	sent := b.enqueued(t, contracts.ToolExecDecide)
	require.Equal(t, job.ID, sent.ID)
	var in contracts.ExecDecideInput
	require.NoError(t, json.Unmarshal(sent.Input, &in))
	require.Equal(t, d, in.Decision)
	raw, err := base64.RawURLEncoding.DecodeString(in.Decision.Signature)
	require.NoError(t, err)
	require.NoError(t, kp.Verify(in.Decision.SigningPayload(), raw))

	for name, bad := range map[string]*contracts.ExecDecision{
		"nil":         nil,
		"bad id":      {ApprovalID: "a b", Verdict: contracts.ExecApprove, Approver: pub, Signature: "s"},
		"bad verdict": {ApprovalID: "a", Verdict: "maybe", Approver: pub, Signature: "s"},
		"no approver": {ApprovalID: "a", Verdict: contracts.ExecReject, Signature: "s"},
	} {
		_, err := b.prod.Decide(ctx, bad, nil)
		require.ErrorIs(t, err, contracts.ErrInvalidInput, name)
	}
}

func event(tool string, status contracts.Status, result string, e *contracts.Error) *contracts.Event {
	ev := contracts.NewEvent("/test", &contracts.Job{ID: "j1", Session: "s1", Tool: tool}, status, 1, time.Now())
	if result != "" {
		ev.Data.Result = json.RawMessage(result)
	}
	ev.Data.Error = e
	return ev
}

func TestCodeModeResult(t *testing.T) {
	t.Parallel()
	failed := contracts.CodeModeResult{
		Status: contracts.CodeModeFailed, Error: "boom", Code: contracts.CodeInternalError,
		Output: []contracts.CodeModeOutput{{Type: contracts.CodeModeOutputText, Text: "before"}},
	}
	details, err := json.Marshal(failed)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		ev     *contracts.Event
		want   *contracts.CodeModeResult
		errIs  error
		failed contracts.ErrorCode
	}{
		{
			name: "completed", ev: event(contracts.ToolCodeModeExec, contracts.StatusCompleted, `{"status":"completed","value":42,"telemetry":{"nestedCalls":1}}`, nil),
			want: &contracts.CodeModeResult{Status: contracts.CodeModeCompleted, Value: json.RawMessage(`42`), Telemetry: contracts.CodeModeTelemetry{NestedCalls: 1}},
		},
		{
			name: "waiting", ev: event(contracts.ToolCodeModeExec, contracts.StatusWaiting, `{"status":"waiting","runId":"j1","reason":"pending_tools","pendingToolCalls":[{"callId":"c1","toolId":"client:me:ask","source":"client","input":{}}]}`, nil),
			want: &contracts.CodeModeResult{
				Status: contracts.CodeModeWaiting, RunID: "j1", Reason: contracts.CodeModeReasonPendingTools,
				PendingToolCalls: []contracts.CodeModePendingToolCall{{CallID: "c1", ToolID: "client:me:ask", Source: contracts.SourceClient, Input: json.RawMessage(`{}`)}},
			},
		},
		{
			name: "failed run", ev: event(contracts.ToolCodeModeWait, contracts.StatusFailed, "", &contracts.Error{Code: contracts.CodeInternalError, Message: "boom", Details: details}),
			want: &failed, failed: contracts.CodeInternalError,
		},
		{
			name: "failed before running", ev: event(contracts.ToolCodeModeExec, contracts.StatusFailed, "", contracts.Errorf(contracts.CodeInvalidInput, "code_mode.exec input: bad")),
			want: &contracts.CodeModeResult{Status: contracts.CodeModeFailed, Code: contracts.CodeInvalidInput, Error: "code_mode.exec input: bad"}, failed: contracts.CodeInvalidInput,
		},
		{
			name: "cancelled without a tool", ev: event("", contracts.StatusCancelled, "", contracts.Errorf(contracts.CodeCancelled, "cancelled by request")),
			want: &contracts.CodeModeResult{Status: contracts.CodeModeFailed, Code: contracts.CodeCancelled, Error: "cancelled by request"}, failed: contracts.CodeCancelled,
		},
		{name: "running", ev: event(contracts.ToolCodeModeExec, contracts.StatusRunning, "", nil), errIs: producer.ErrNoResult},
		{name: "another tool", ev: event(contracts.ToolExec, contracts.StatusCompleted, `{}`, nil), errIs: producer.ErrNoResult},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := producer.CodeModeResult(tc.ev)
			if tc.errIs != nil {
				require.ErrorIs(t, err, tc.errIs)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			if tc.failed != "" {
				require.ErrorIs(t, got.Err(), &contracts.Error{Code: tc.failed})
			} else {
				require.NoError(t, got.Err())
			}
		})
	}
}

func TestExecResultAndDecodeResult(t *testing.T) {
	t.Parallel()
	res, bg, err := producer.ExecResult(event(contracts.ToolExec, contracts.StatusCompleted, `{"exitCode":0,"stdout":"1\n","stderr":"","durationMs":3}`, nil))
	require.NoError(t, err)
	require.Nil(t, bg)
	require.Equal(t, &contracts.ExecResult{Stdout: "1\n", DurationMs: 3}, res)

	res, bg, err = producer.ExecResult(event(contracts.ToolExec, contracts.StatusCompleted, `{"status":"running","sessionId":"j1-bg","command":"sleep 60","yielded":true}`, nil))
	require.NoError(t, err)
	require.Nil(t, res)
	require.Equal(t, &contracts.ExecBackgroundResult{Status: "running", SessionID: contracts.ExecSessionID("j1"), Command: "sleep 60", Yielded: true}, bg)

	denied := event(contracts.ToolExec, contracts.StatusDenied, `{"reason":"timeout","command":"seq 3"}`, contracts.Errorf(contracts.CodeDenied, "timeout"))
	_, _, err = producer.ExecResult(denied)
	require.ErrorIs(t, err, contracts.ErrDenied)
	d, err := producer.DecodeResult[contracts.ExecDeniedResult](denied)
	require.NoError(t, err)
	require.Equal(t, contracts.ExecReasonTimeout, d.Reason)

	_, _, err = producer.ExecResult(event(contracts.ToolExec, contracts.StatusApprovalPending, `{"approvalId":"j1"}`, nil))
	require.ErrorIs(t, err, producer.ErrNoResult)
	p, err := producer.DecodeResult[contracts.ExecPendingResult](event(contracts.ToolExec, contracts.StatusApprovalPending, `{"approvalId":"j1"}`, nil))
	require.NoError(t, err)
	require.Equal(t, "j1", p.ApprovalID)

	_, err = producer.DecodeResult[contracts.CodeExecutionDetails](event(contracts.ToolCodeExecution, contracts.StatusFailed, "", contracts.Errorf(contracts.CodeProviderUnavailable, "503")))
	require.ErrorIs(t, err, contracts.ErrProviderUnavailable)
	_, err = producer.DecodeResult[contracts.CodeExecutionDetails](event(contracts.ToolCodeExecution, contracts.StatusRunning, "", nil))
	require.ErrorIs(t, err, producer.ErrNoResult)
	_, err = producer.DecodeResult[contracts.CodeExecutionDetails](event(contracts.ToolCodeExecution, contracts.StatusCompleted, `[1]`, nil))
	require.Error(t, err)
}
