// Command chatbot is an asynchronous chat-bot loop on toolq. Each turn
// publishes a code-mode run whose code calls the approval-gated exec tool;
// the bot streams the run's events back to the user, relays an
// approval_pending to them, signs their answer with an approver key, posts
// it, and goes on streaming until the run completes.
//
//	toolq dev --codemode-exec &
//	go run ./examples/chatbot --nats nats://127.0.0.1:4222 --seed-file .toolq/dev/approver.seed
//	you> run uname -sr
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
)

// ExecTool is the catalog id of the shell exec tool in code mode.
const ExecTool = "toolq:core:exec"

// Config of a chat.
type Config struct {
	// NATS is the server's URL.
	NATS string
	// Session is the conversation: every run, nested call and decision of
	// the chat is a job of this session.
	Session string
	// Seed is the approver's nkey seed that signs the user's decisions.
	Seed []byte
	// In is what the user types; Out is what the bot says.
	In  io.Reader
	Out io.Writer
}

// Bot is one conversation.
type Bot struct {
	p       *producer.Producer
	session string
	kp      nkeys.KeyPair
	in      *bufio.Reader
	out     io.Writer
}

// Run chats until the user says quit (or In ends, or ctx ends).
func Run(ctx context.Context, cfg Config) error {
	nc, err := nats.Connect(cfg.NATS, nats.Name("toolq example chatbot"))
	if err != nil {
		return fmt.Errorf("chatbot: connect: %w", err)
	}
	defer nc.Close()
	b, err := NewBot(nc, cfg)
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(b.out, "bot: hello. Say `run COMMAND` and I run it on a toolq worker (commands off the allowlist need your approval); `quit` ends.\n")
	for {
		fmt.Fprint(b.out, "you> ")
		line, err := b.readLine()
		if err != nil {
			fmt.Fprintln(b.out)
			return nil // the user went away
		}
		switch cmd, isRun := strings.CutPrefix(line, "run "); {
		case line == "quit" || line == "exit":
			fmt.Fprintln(b.out, "bot: bye.")
			return nil
		case isRun && strings.TrimSpace(cmd) != "":
			if _, err := b.Turn(ctx, strings.TrimSpace(cmd)); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fmt.Fprintf(b.out, "bot: that went wrong: %v\n", err)
			}
		case line == "":
		default:
			fmt.Fprintln(b.out, "bot: I only run commands: say `run COMMAND`.")
		}
	}
}

// NewBot starts a conversation on nc.
func NewBot(nc *nats.Conn, cfg Config) (*Bot, error) {
	kp, err := nkeys.FromSeed(cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("chatbot: approver seed: %w", err)
	}
	p, err := producer.New(nc, &producer.Config{Session: cfg.Session})
	if err != nil {
		kp.Wipe()
		return nil, err
	}
	return &Bot{p: p, session: cfg.Session, kp: kp, in: bufio.NewReader(cfg.In), out: cfg.Out}, nil
}

// Close ends the conversation.
func (b *Bot) Close() {
	b.p.Close()
	b.kp.Wipe()
}

// turnCode is the guest code of a turn: it calls the exec tool with the
// command and says what came of it. A denied or failed call rejects the
// promise; the code reports that instead of failing the run.
func turnCode(command string) string {
	q, _ := json.Marshal(command)
	return fmt.Sprintf(`const command = %s;
try {
  const r = await tools.callValue(%q, {command});
  text(r.stdout.trimEnd());
  return {ran: true, exitCode: r.exitCode};
} catch (e) {
  text("the command was not run: " + e.message);
  return {ran: false};
}`, q, ExecTool)
}

// Turn runs command in a code-mode run and streams its events until the
// run ends, relaying approvals to the user. It returns the run's result.
func (b *Bot) Turn(ctx context.Context, command string) (*contracts.CodeModeResult, error) {
	job, err := b.p.SubmitCode(ctx, &contracts.CodeModeExecInput{
		Code: turnCode(command), Tools: []string{ExecTool}, AutoResume: true,
	}, &producer.SubmitOpts{Session: b.session})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.out, "bot: on it (run %s).\n", job.ID)
	var res *contracts.CodeModeResult
	// The session is the conversation: its events are this run's, its
	// nested calls' (their parent is the run) and earlier turns' (skipped).
	err = b.p.ReadEvents(ctx, b.session, &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
		d := ev.Data
		switch {
		case d.JobID == job.ID && d.Status == contracts.StatusWaiting:
			fmt.Fprintln(b.out, "bot: …waiting for the command (the run sleeps in NATS meanwhile).")
		case d.JobID == job.ID && d.Status.Terminal():
			r, err := producer.CodeModeResult(ev)
			if err != nil {
				return err
			}
			res = r
			return producer.ErrStop
		case d.Parent != nil && d.Parent.RunID == job.ID:
			return b.nested(ctx, ev)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, o := range res.Output {
		if o.Text != "" {
			fmt.Fprintf(b.out, "bot: %s\n", strings.ReplaceAll(o.Text, "\n", "\n     "))
		}
	}
	if e := res.Err(); e != nil {
		fmt.Fprintf(b.out, "bot: the run %s: %v\n", res.Status, e)
	}
	return res, nil
}

// nested tells the user about an event of one of the run's calls, and
// asks them when it waits for their approval.
func (b *Bot) nested(ctx context.Context, ev *contracts.Event) error {
	switch ev.Data.Status {
	case contracts.StatusApprovalPending:
		var pr contracts.ExecPendingResult
		if err := json.Unmarshal(ev.Data.Result, &pr); err != nil {
			return fmt.Errorf("approval_pending event: %w", err)
		}
		return b.ask(ctx, ev.Data.Parent.RunID, &pr)
	case contracts.StatusApproved:
		fmt.Fprintln(b.out, "bot: approved; the command runs now.")
	case contracts.StatusDenied:
		fmt.Fprintln(b.out, "bot: denied; the command will not run.")
	}
	return nil
}

// ask shows the plan of a pending approval, reads the user's answer and
// posts it signed. When the worker refuses the decision the approval
// would wait until it expires: the bot cancels the run instead.
func (b *Bot) ask(ctx context.Context, runID string, pr *contracts.ExecPendingResult) error {
	plan := pr.Plan()
	if plan.Hash() != pr.Hash {
		// What would be signed is not what is shown: sign nothing.
		fmt.Fprintf(b.out, "bot: approval %s does not match its hash; I will not sign it.\n", pr.ApprovalID)
		return nil
	}
	fmt.Fprintf(b.out, "bot: this needs your approval: %s\n", pr.Command)
	for _, argv := range pr.Argv {
		fmt.Fprintf(b.out, "       runs %q\n", argv)
	}
	fmt.Fprintf(b.out, "       host %s, timeout %s, expires %s (%s)\n", pr.Host,
		time.Duration(pr.TimeoutMs)*time.Millisecond, pr.ExpiresAt.Local().Format(time.Kitchen), pr.Reason)
	fmt.Fprint(b.out, "bot: approve? [y/N] ")
	answer, err := b.readLine()
	if err != nil {
		answer = ""
	}
	verdict, reason := contracts.ExecReject, "denied in the chat"
	if a := strings.ToLower(answer); a == "y" || a == "yes" {
		verdict, reason = contracts.ExecApprove, ""
	}
	d, err := b.sign(pr, verdict, reason)
	if err != nil {
		return err
	}
	job, err := b.p.Decide(ctx, &d, &producer.SubmitOpts{Session: b.session, Progress: true})
	if err != nil {
		return err
	}
	// The decide job says "applied" with a progress event, or fails when
	// the worker refuses the decision (an unknown approver, say).
	got, err := b.p.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Progress: true})
	if err != nil {
		return err
	}
	if got.Data.Status == contracts.StatusFailed {
		fmt.Fprintf(b.out, "bot: the worker refused the decision: %v; I cancel the run.\n", got.Data.Error)
		if err := b.p.Cancel(ctx, b.session, runID); err != nil && !errors.Is(err, producer.ErrFinished) {
			return err
		}
	}
	return nil
}

// sign makes the user's decision on the approval, signed with the
// approver's key over contracts.ExecDecision.SigningPayload.
func (b *Bot) sign(pr *contracts.ExecPendingResult, v contracts.ExecVerdict, reason string) (contracts.ExecDecision, error) {
	d := contracts.NewExecDecision(&contracts.ExecApproval{ID: pr.ApprovalID, Tenant: pr.Tenant, Hash: pr.Hash}, v, false, reason, time.Now())
	pub, err := b.kp.PublicKey()
	if err != nil {
		return d, err
	}
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return d, err
	}
	d.Approver, d.Nonce = pub, base64.RawURLEncoding.EncodeToString(nonce[:])
	sig, err := b.kp.Sign(d.SigningPayload())
	if err != nil {
		return d, err
	}
	d.Signature = base64.RawURLEncoding.EncodeToString(sig)
	return d, nil
}

func (b *Bot) readLine() (string, error) {
	line, err := b.in.ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

func main() {
	var seedFile string
	cfg := Config{In: os.Stdin, Out: os.Stdout}
	flag.StringVar(&cfg.NATS, "nats", envOr("TOOLQ_NATS", nats.DefaultURL), "NATS server URL (env TOOLQ_NATS)")
	flag.StringVar(&cfg.Session, "session", "chat-"+time.Now().UTC().Format("20060102-150405"), "the conversation's session")
	flag.StringVar(&seedFile, "seed-file", envOr("TOOLQ_APPROVER_SEED_FILE", ".toolq/dev/approver.seed"), "approver nkey seed that signs your decisions (toolq dev's, or `toolq keygen`'s)")
	flag.Parse()
	seed, err := os.ReadFile(seedFile) //nolint:gosec // G304: the file the user named
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatbot:", err)
		os.Exit(2)
	}
	cfg.Seed = []byte(strings.TrimSpace(string(seed)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "chatbot:", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
