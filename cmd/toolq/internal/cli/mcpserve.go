package cli

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/cmd/toolq/internal/ui"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/tooldefs"
)

// mcpServeConfig configures an MCP server in front of the bus.
type mcpServeConfig struct {
	// Session, when set, is the toolq session of every MCP session;
	// otherwise each MCP session gets its own (mcpSession).
	Session string
	// ApprovalWait is how long a call whose job waits for an approval
	// keeps waiting after the client's person accepted the elicitation.
	ApprovalWait time.Duration
	// Version is the server's version in the MCP handshake.
	Version string
	// Token, when set, is the bearer token every streamable HTTP request
	// must carry (Authorization: Bearer <token>).
	Token string
}

// minTokenBytes is the shortest bearer token taken (the console's too).
const minTokenBytes = ui.MinTokenBytes

// readToken reads a token file (flag names its flag), or the environment
// variable env when no file is named: surrounding whitespace trimmed, at
// least minTokenBytes.
func readToken(flag, file, env string) (string, error) {
	tok := os.Getenv(env)
	if file != "" {
		data, err := os.ReadFile(file) //nolint:gosec // G304: the operator names the token file
		if err != nil {
			return "", contracts.Errorf(contracts.CodeInvalidInput, "%s: %v", flag, err)
		}
		tok = string(data)
	}
	tok = strings.TrimSpace(tok)
	if tok != "" && len(tok) < minTokenBytes {
		return "", contracts.Errorf(contracts.CodeInvalidInput, "the token of %s (or %s) must be at least %d bytes", flag, env, minTokenBytes)
	}
	return tok, nil
}

// bearer refuses a request without the token, in constant time; the
// refusal names the scheme (RFC 6750).
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolq mcp"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// mcpServe serves the model-facing tools (tooldefs) to MCP clients: each
// tools/call becomes a job submitted with the producer, in the toolq
// session of the MCP session, under the NATS credentials of the process
// (so its tenant is the account of those credentials, never something the
// client says).
type mcpServe struct {
	nc      *nats.Conn
	p       *producer.Producer
	subj    contracts.Subjects
	surface *tooldefs.Surface
	server  *sdk.Server
	cfg     mcpServeConfig
	log     *slog.Logger
	// stdio is the session of connections without an MCP session id
	// (stdio, in-memory): one per process.
	stdio string
	// stateKey signs the requestState of an approval's elicitation
	// (multi round-trip requests): one random key per process.
	stateKey []byte
}

func newMCPServe(nc *nats.Conn, p *producer.Producer, subj contracts.Subjects, surface *tooldefs.Surface, log *slog.Logger, cfg *mcpServeConfig) (*mcpServe, error) {
	c := mcpServeConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Session != "" {
		if err := contracts.ValidateID("--session", c.Session); err != nil {
			return nil, err
		}
	}
	if c.ApprovalWait == 0 {
		c.ApprovalWait = 15 * time.Minute
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	s := &mcpServe{nc: nc, p: p, subj: subj, surface: surface, cfg: c, log: log, stdio: "mcp-" + nuid.Next(), stateKey: make([]byte, 32)}
	if _, err := rand.Read(s.stateKey); err != nil {
		return nil, err
	}
	s.server = sdk.NewServer(&sdk.Implementation{Name: "toolq", Version: c.Version}, &sdk.ServerOptions{
		Logger: log,
		Instructions: "toolq runs each tool call as a job on its queue. A code_mode_exec result that is waiting " +
			"names a runId: call code_mode_wait with it. A call that waits for a person's approval returns its approval id.",
	})
	for _, d := range surface.Definitions {
		t := &sdk.Tool{
			Name: d.Name, Description: d.Description, InputSchema: d.InputSchema,
			Meta: sdk.Meta{tooldefs.MetaTool: d.Tool},
		}
		if len(d.OutputSchema) > 0 {
			t.OutputSchema = d.OutputSchema
		}
		s.server.AddTool(t, s.handler(d))
	}
	return s, nil
}

// session is the toolq session of an MCP session: the --session given, or
// mcp-<MCP session id> when that is an id, or mcp-<its hash>; connections
// without an MCP session id (stdio) share the process's own.
func (s *mcpServe) session(ss *sdk.ServerSession) string {
	if s.cfg.Session != "" {
		return s.cfg.Session
	}
	id := ""
	if ss != nil {
		id = ss.ID()
	}
	if id == "" {
		return s.stdio
	}
	if session := "mcp-" + id; contracts.ValidID(session) {
		return session
	}
	sum := sha256.Sum256([]byte(id))
	return "mcp-" + hex.EncodeToString(sum[:16])
}

func (s *mcpServe) handler(d tooldefs.Definition) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return s.call(ctx, req, d)
	}
}

// progressBuffer is how many of a job's events a call holds while the
// client takes its progress notifications: a code-mode run's output comes
// as many progress events. Past it an event is dropped, which costs a
// progress notification only (the result comes by Await).
const progressBuffer = 1024

// call runs one tools/call as a job and waits for it.
func (s *mcpServe) call(ctx context.Context, req *sdk.CallToolRequest, d tooldefs.Definition) (*sdk.CallToolResult, error) {
	session := s.session(req.Session)
	if req.Params.RequestState != "" || len(req.Params.InputResponses) > 0 {
		// The retry of a call whose approval rode in its result.
		return s.approvalAnswered(ctx, req, d, session)
	}
	token := req.Params.GetProgressToken()
	input := req.Params.Arguments
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	id := nuid.Next()
	var events chan *nats.Msg
	if token != nil {
		// Subscribed before the submit, so no running event is missed; the
		// job asks for them (Progress).
		events = make(chan *nats.Msg, progressBuffer)
		sub, err := s.nc.ChanSubscribe(s.subj.Event(session, id), events)
		if err != nil {
			return nil, fmt.Errorf("follow the job's events: %w", err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	job, err := s.p.Submit(ctx, d.Tool, input, &producer.SubmitOpts{
		ID: id, Session: session, Progress: token != nil, Meta: map[string]string{"via": "mcp"},
	})
	if err != nil {
		return errorResult(d, contracts.StatusFailed, asError(err)), nil
	}
	s.log.Debug("mcp call submitted", slog.String("tool", d.Tool), slog.String("session", session), slog.String("job", job.ID))
	ev, err := s.await(ctx, req.Session, job, token, events, &producer.AwaitOpts{Parked: true})
	if err != nil {
		return nil, s.abandon(ctx, job, err)
	}
	if ev.Data.Status == contracts.StatusApprovalPending {
		return s.approval(ctx, req, d, job, token, events, ev)
	}
	return toolResult(d, ev), nil
}

// abandon cancels the job of a call the client gave up on (its context
// ended: a cancelled request, a closed session) and returns why the call
// ended.
func (s *mcpServe) abandon(ctx context.Context, job *contracts.Job, err error) error {
	if ctx.Err() == nil {
		return fmt.Errorf("waiting for job %s: %w", job.ID, err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if cerr := s.p.Cancel(cctx, job.Session, job.ID); cerr != nil && !errors.Is(cerr, producer.ErrFinished) {
		s.log.Warn("mcp call abandoned, its job not cancelled", slog.String("job", job.ID), slog.Any("err", cerr))
	} else {
		s.log.Info("mcp call abandoned, its job cancelled", slog.String("job", job.ID))
	}
	return ctx.Err()
}

// await waits for the job as Await does and, when the client asked for
// progress, turns each event that comes meanwhile (running, progress, a
// parked status) into a progress notification.
func (s *mcpServe) await(ctx context.Context, ss *sdk.ServerSession, job *contracts.Job, token any, events <-chan *nats.Msg, opts *producer.AwaitOpts) (*contracts.Event, error) {
	if events == nil {
		return s.p.Await(ctx, job.Session, job.ID, opts)
	}
	type outcome struct {
		ev  *contracts.Event
		err error
	}
	done := make(chan outcome, 1)
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		ev, err := s.p.Await(actx, job.Session, job.ID, opts)
		done <- outcome{ev, err}
	})
	n := 0
	for {
		select {
		case o := <-done:
			return o.ev, o.err
		case m := <-events:
			var ev contracts.Event
			if json.Unmarshal(m.Data, &ev) != nil || ev.Data.Status.Terminal() {
				continue
			}
			n++
			if err := ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
				ProgressToken: token, Progress: float64(n), Message: fmt.Sprintf("job %s is %s", job.ID, ev.Data.Status),
			}); err != nil {
				s.log.Debug("mcp progress not sent", slog.Any("err", err))
			}
		}
	}
}

// pendingApproval is what a call tells about a job waiting for approval.
type pendingApproval struct {
	ApprovalID string   `json:"approvalId"`
	Argv       []string `json:"argv"`
	Command    string   `json:"command"`
}

// approvalInput names the elicitation of an approval among a result's
// input requests.
const approvalInput = "approval"

// approval answers a call whose job waits for a person's approval. When
// the client supports elicitation, its person is told what to approve and
// how; if they accept (they approved it with an approver's key), the call
// waits on for the job's end. Before MCP protocol 2026-07-28 the server
// asks with an elicitation request of its own; from it on a server may not
// (SEP-2322), so the question rides in the call's result as an input
// request, and the client's retry carries the answer (approvalAnswered).
// Otherwise the call returns a pending result with the approval id and the
// commands. This server never decides an approval itself: its credentials
// are the agent's, and an agent must not approve its own commands.
func (s *mcpServe) approval(ctx context.Context, req *sdk.CallToolRequest, d tooldefs.Definition, job *contracts.Job, token any, events <-chan *nats.Msg, ev *contracts.Event) (*sdk.CallToolResult, error) {
	var pending pendingApproval
	_ = json.Unmarshal(ev.Data.Result, &pending)
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return pendingResult(d, job, pending.ApprovalID), nil
	}
	ask := &sdk.ElicitParams{
		Message: fmt.Sprintf("toolq: job %s (%s) waits for approval %s. Approve it with `toolq approve %s` "+
			"(or deny it with `toolq deny %s`), then accept to wait for its result; decline to return now.",
			job.ID, d.Tool, pending.ApprovalID, pending.ApprovalID, pending.ApprovalID),
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}},
	}
	if multiRoundTrip(req.Session) {
		return &sdk.CallToolResult{
			InputRequests: sdk.InputRequestMap{approvalInput: ask},
			RequestState:  s.sealState(approvalState{Session: job.Session, Tool: d.Tool, Job: job.ID, Approval: pending.ApprovalID}),
		}, nil
	}
	res, err := req.Session.Elicit(ctx, ask)
	if err != nil {
		s.log.Debug("mcp elicitation failed; returning the pending approval", slog.Any("err", err))
		return pendingResult(d, job, pending.ApprovalID), nil
	}
	return s.approvalAccepted(ctx, req, d, job, token, events, pending.ApprovalID, res.Action == "accept")
}

// approvalAnswered serves the retry of a call whose result asked for an
// approval (protocol 2026-07-28 and later): its requestState, which this
// process signed, names the job; the answer of the elicitation decides
// whether the call waits for it. A state this process did not sign, or one
// of another session or tool, is refused.
func (s *mcpServe) approvalAnswered(ctx context.Context, req *sdk.CallToolRequest, d tooldefs.Definition, session string) (*sdk.CallToolResult, error) {
	st, ok := s.openState(req.Params.RequestState)
	if !ok || st.Session != session || st.Tool != d.Tool {
		return errorResult(d, contracts.StatusFailed, contracts.Errorf(contracts.CodeInvalidInput,
			"the call's requestState is not one this server gave this session for %s", d.Name)), nil
	}
	accepted := false
	if r, ok := req.Params.InputResponses[approvalInput].(*sdk.ElicitResult); ok && r != nil {
		accepted = r.Action == "accept"
	}
	job := &contracts.Job{ID: st.Job, Session: st.Session, Tool: st.Tool}
	token := req.Params.GetProgressToken()
	var events chan *nats.Msg
	if token != nil && accepted {
		events = make(chan *nats.Msg, progressBuffer)
		sub, err := s.nc.ChanSubscribe(s.subj.Event(session, job.ID), events)
		if err != nil {
			return nil, fmt.Errorf("follow the job's events: %w", err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	return s.approvalAccepted(ctx, req, d, job, token, events, st.Approval, accepted)
}

// approvalAccepted waits (ApprovalWait at most) for the job of an accepted
// approval and returns its result; a declined one, or one still pending
// after the wait, returns the pending result.
func (s *mcpServe) approvalAccepted(ctx context.Context, req *sdk.CallToolRequest, d tooldefs.Definition, job *contracts.Job, token any, events <-chan *nats.Msg, approvalID string, accepted bool) (*sdk.CallToolResult, error) {
	if accepted {
		wctx, cancel := context.WithTimeout(ctx, s.cfg.ApprovalWait)
		defer cancel()
		end, err := s.await(wctx, req.Session, job, token, events, nil)
		if err == nil {
			return toolResult(d, end), nil
		}
		if ctx.Err() != nil {
			return nil, s.abandon(ctx, job, err)
		}
		// Still pending after ApprovalWait: say so.
	}
	return pendingResult(d, job, approvalID), nil
}

// multiRoundTrip reports whether the session speaks MCP 2026-07-28 or
// later, where a server's questions ride in results (the go-sdk's own
// rule: a session without initialize parameters is of the latest
// version).
func multiRoundTrip(ss *sdk.ServerSession) bool {
	if p := ss.InitializeParams(); p != nil && p.ProtocolVersion != "" {
		return p.ProtocolVersion >= "2026-07-28"
	}
	return true
}

// approvalState is the requestState of an approval's elicitation: the
// call's job, signed by this process so that a client's retry cannot make
// it wait for another session's job.
type approvalState struct {
	Session  string `json:"s"`
	Tool     string `json:"t"`
	Job      string `json:"j"`
	Approval string `json:"a"`
}

func (s *mcpServe) sealState(st approvalState) string {
	data, _ := json.Marshal(st)
	mac := hmac.New(sha256.New, s.stateKey)
	mac.Write(data)
	return base64.RawURLEncoding.EncodeToString(data) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func (s *mcpServe) openState(state string) (approvalState, bool) {
	body, sum, ok := strings.Cut(state, ".")
	if !ok {
		return approvalState{}, false
	}
	data, err1 := base64.RawURLEncoding.DecodeString(body)
	got, err2 := base64.RawURLEncoding.DecodeString(sum)
	if err1 != nil || err2 != nil {
		return approvalState{}, false
	}
	mac := hmac.New(sha256.New, s.stateKey)
	mac.Write(data)
	var st approvalState
	if !hmac.Equal(mac.Sum(nil), got) || json.Unmarshal(data, &st) != nil || !contracts.ValidID(st.Job) {
		return approvalState{}, false
	}
	return st, true
}

// pendingResult is the result of a call whose job still waits for a
// person's approval: the approval id and the commands.
func pendingResult(d tooldefs.Definition, job *contracts.Job, approvalID string) *sdk.CallToolResult {
	structured := map[string]any{
		"status": contracts.StatusApprovalPending, "approvalId": approvalID,
		"jobId": job.ID, "session": job.Session, "tool": d.Tool,
		"approve": "toolq approve " + approvalID, "deny": "toolq deny " + approvalID,
		"follow": fmt.Sprintf("toolq events --session %s --job %s --follow", job.Session, job.ID),
	}
	text := fmt.Sprintf("Pending: job %s waits for a person's approval %s. It runs once approved "+
		"(`toolq approve %s`) and ends denied if denied (`toolq deny %s`) or when the approval times out. "+
		"Follow it with `toolq events --session %s --job %s --follow`.",
		job.ID, approvalID, approvalID, approvalID, job.Session, job.ID)
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
	if len(d.OutputSchema) == 0 {
		res.StructuredContent = structured
	}
	return res
}

// toolResult is the MCP result of a job's event: a completed (or, for code
// mode, waiting) job's result as text and, when it is an object, as
// structured content; anything else an error result.
func toolResult(d tooldefs.Definition, ev *contracts.Event) *sdk.CallToolResult {
	switch ev.Data.Status {
	case contracts.StatusCompleted, contracts.StatusWaiting:
		value := ev.Data.Result
		if len(value) == 0 {
			value = json.RawMessage("null")
		}
		res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(value)}}}
		if isJSONObject(value) {
			res.StructuredContent = value
		}
		return res
	}
	e := ev.Data.Error
	if e == nil {
		e = &contracts.Error{Code: contracts.CodeInternalError, Message: "job " + ev.Data.JobID + " " + string(ev.Data.Status)}
		switch ev.Data.Status {
		case contracts.StatusCancelled:
			e.Code = contracts.CodeCancelled
		case contracts.StatusDenied:
			e.Code = contracts.CodeDenied
		}
	}
	return errorResult(d, ev.Data.Status, e)
}

// errorResult is the MCP result of a job that did not complete: isError,
// its code and message as text, and for code mode's tools the failed
// CodeModeResult as structured content (their output schema).
func errorResult(d tooldefs.Definition, status contracts.Status, e *contracts.Error) *sdk.CallToolResult {
	res := &sdk.CallToolResult{
		IsError: true,
		Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%s %s: %s: %s", d.Tool, status, e.Code, e.Message)}},
	}
	if !contracts.IsCodeModeTool(d.Tool) {
		return res
	}
	var failed contracts.CodeModeResult
	if len(e.Details) == 0 || json.Unmarshal(e.Details, &failed) != nil || failed.Status != contracts.CodeModeFailed {
		failed = contracts.CodeModeResult{Status: contracts.CodeModeFailed, Error: e.Message, Code: e.Code}
	}
	res.StructuredContent = failed
	return res
}

// asError is err as a contracts error (a submit that failed).
func asError(err error) *contracts.Error {
	var ce *contracts.Error
	if errors.As(err, &ce) {
		return &contracts.Error{Code: ce.Code, Message: err.Error()}
	}
	return &contracts.Error{Code: contracts.CodeInternalError, Message: err.Error()}
}

func isJSONObject(v json.RawMessage) bool {
	for _, c := range v {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}

// serveStdio serves one MCP client on stdin and stdout until it leaves or
// ctx ends.
func (s *mcpServe) serveStdio(ctx context.Context) error {
	return s.server.Run(ctx, &sdk.StdioTransport{})
}

// serveHTTP serves MCP's streamable HTTP transport at /mcp on ln until ctx
// ends.
func (s *mcpServe) serveHTTP(ctx context.Context, ln net.Listener) error {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.server }, &sdk.StreamableHTTPOptions{
		Logger: s.log, SessionTimeout: 30 * time.Minute,
	})
	mux := http.NewServeMux()
	if s.cfg.Token != "" {
		mux.Handle("/mcp", bearer(s.cfg.Token, h))
	} else {
		mux.Handle("/mcp", h)
	}
	srv := &http.Server{
		Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn), // not Go's default logger
	}
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { errc <- srv.Serve(ln) })
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close() // open event streams do not end by themselves
	}
	return nil
}

// checkListen refuses an --http address that is not a loopback one unless
// the endpoint takes a bearer token or the operator said they accept that
// it has no authentication.
func checkListen(addr string, remote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return contracts.Errorf(contracts.CodeInvalidInput, "--http %q: want host:port: %v", addr, err)
	}
	if ui.Loopback(host) || remote {
		return nil
	}
	return contracts.Errorf(contracts.CodeInvalidInput,
		"--http %q is not a loopback address: the MCP endpoint has no authentication of its own, and anyone who reaches it "+
			"runs tools with this process's NATS credentials; listen on 127.0.0.1, require a bearer token (--http-token-file), or pass --allow-remote if something in front authenticates", addr)
}

func newMCPCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "mcp", Short: "toolq as an MCP server"}
	cmd.AddCommand(newMCPServeCmd(g))
	return cmd
}

func newMCPServeCmd(g *globals) *cobra.Command {
	var (
		sf     surfaceFlags
		cfg    mcpServeConfig
		listen string
		remote bool
		token  string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve toolq's tools to MCP clients, on stdio or streamable HTTP",
		Long: `Serve the tools a model is given (as toolq tools export makes them) to an MCP
client. Each tools/call becomes a job on the bus, submitted with this process's
NATS credentials (--nats, --creds, --nkey-seed, --tenant-account): its tenant is
the account of those credentials, never something the client says. Each MCP
session gets a toolq session of its own (mcp-<session id>; one per process on
stdio), so code_mode_wait resumes only the runs of the same MCP session.

Long calls report progress when the client asks (a progress token); a call
whose job waits for a person's approval returns the approval id and the
toolq approve command, or, when the client supports elicitation, asks its
person to approve and waits. Cancelling a call cancels its job.

Without --http it speaks MCP on stdin and stdout. --http serves streamable
HTTP at /mcp. With --http-token-file (or TOOLQ_MCP_TOKEN) every request must
carry that bearer token, and any address may be used; without one, only a
loopback address, unless --allow-remote says something in front authenticates.`,
		Example: `  toolq mcp serve --code-mode true
  toolq mcp serve --http 127.0.0.1:8765 --creds acme-agent.creds --tenant-account`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listen != "" {
				var err error
				if cfg.Token, err = readToken("--http-token-file", token, "TOOLQ_MCP_TOKEN"); err != nil {
					return err
				}
				if err := checkListen(listen, remote || cfg.Token != ""); err != nil {
					return err
				}
			} else if token != "" {
				return contracts.Errorf(contracts.CodeInvalidInput, "--http-token-file is for --http")
			}
			nc, err := g.connect("toolq mcp serve")
			if err != nil {
				return err
			}
			defer nc.Close()
			p, err := producer.New(nc, &producer.Config{
				Subjects: g.subjects(), Session: producerSession(cfg.Session), Timeout: g.timeout, Logger: g.log,
				TenantAccount: g.tenantAccount,
			})
			if err != nil {
				return err
			}
			defer p.Close()
			sctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			surface, err := sf.surface(sctx, g, nc)
			cancel()
			if err != nil {
				return err
			}
			s, err := newMCPServe(nc, p, g.subjects(), surface, g.log, &cfg)
			if err != nil {
				return err
			}
			if listen == "" {
				return s.serveStdio(cmd.Context())
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--http: %w", err)
			}
			g.tell("serving MCP on http://%s/mcp (%d tools)", ln.Addr(), len(surface.Definitions))
			return s.serveHTTP(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "http", "", "serve streamable HTTP on this host:port (at /mcp) instead of stdio")
	f.BoolVar(&remote, "allow-remote", false, "accept a non-loopback --http address without a token: something in front must authenticate")
	f.StringVar(&token, "http-token-file", "", "require Authorization: Bearer <the file's token> on every --http request (at least 16 bytes; or env TOOLQ_MCP_TOKEN); a non-loopback address is then allowed")
	f.StringVar(&cfg.Session, "session", "", "the toolq session of every MCP session (default: one per MCP session)")
	f.DurationVar(&cfg.ApprovalWait, "approval-wait", 15*time.Minute, "after a person accepts an approval elicitation, how long the call waits for the job")
	sf.register(f, tooldefs.CodeModeOn)
	return cmd
}

// producerSession is the producer's default session: the fixed one, if any
// (every submit names its session anyway).
func producerSession(s string) string {
	if s == "" {
		return producer.DefaultSession
	}
	return s
}
