package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/shellexec"
)

// decideFlags are the flags of approve and deny.
type decideFlags struct {
	seedFile string
	session  string
	always   bool
	reason   string
	wait     bool
	login    bool
}

func newApproveCmd(g *globals) *cobra.Command {
	f := &decideFlags{}
	cmd := &cobra.Command{
		Use:   "approve APPROVAL_ID",
		Short: "Approve an exec command waiting for a person (signed with your approver nkey)",
		Long: `approve reads the approval (the exact command, argv, workdir and env that
will run), signs an approval of exactly that with your approver nkey seed and
submits it. The worker accepts it only from a configured approver, once.
With --always the command's binaries are added to the shared allowlist, so
the same command runs without asking next time.`,
		Example: `  toolq approve 3Yx9kq2 --seed-file ~/.toolq/approver.seed
  toolq approve 3Yx9kq2 --always --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return decide(cmd.Context(), g, args[0], shell.Approve, f)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&f.always, "always", false, "also add the command's binaries to the shared allowlist")
	cmd.Flags().BoolVar(&f.wait, "wait", false, "wait for the approved command to finish and print its final event")
	return cmd
}

func newDenyCmd(g *globals) *cobra.Command {
	f := &decideFlags{}
	cmd := &cobra.Command{
		Use:     "deny APPROVAL_ID",
		Short:   "Deny an exec command waiting for a person (signed with your approver nkey)",
		Example: `  toolq deny 3Yx9kq2 --reason "not on production"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return decide(cmd.Context(), g, args[0], shell.Reject, f)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&f.reason, "reason", "", "why, shown in the job's denied event")
	return cmd
}

func (f *decideFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.seedFile, "seed-file", os.Getenv("TOOLQ_APPROVER_SEED_FILE"),
		"file with your approver nkey seed (env TOOLQ_APPROVER_SEED_FILE)")
	cmd.Flags().StringVar(&f.session, "session", "approvals", "session of the decision job")
	cmd.Flags().BoolVar(&f.login, "nkey-login", false, "log in to NATS as the approver nkey user of --seed-file (see deploy/nats/approvers.conf)")
}

// producer connects as the approver when asked, else as every command does.
func (f *decideFlags) producer(g *globals) (*producer.Producer, func(), error) {
	if !f.login {
		return g.producer(f.session)
	}
	opt, err := nats.NkeyOptionFromSeed(f.seedFile)
	if err != nil {
		return nil, nil, contracts.Errorf(contracts.CodeInvalidInput, "--seed-file: %v", err)
	}
	nc, err := nats.Connect(g.natsURL, nats.Name("toolq approver"), nats.Timeout(5*time.Second), opt)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", redactURL(g.natsURL), err)
	}
	p, err := producer.New(nc, &producer.Config{Subjects: g.subjects(), Session: f.session, Timeout: g.timeout, Logger: g.log})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return p, func() { p.Close(); nc.Close() }, nil
}

// decide signs and submits a decision, then reports what it did: the exec
// job's approved or denied event, or why the worker refused it.
func decide(ctx context.Context, g *globals, id string, v shell.Verdict, f *decideFlags) error {
	if f.seedFile == "" {
		return contracts.Errorf(contracts.CodeInvalidInput, "--seed-file is required (or TOOLQ_APPROVER_SEED_FILE)")
	}
	raw, err := os.ReadFile(f.seedFile)
	if err != nil {
		return contracts.Errorf(contracts.CodeInvalidInput, "--seed-file: %v", err)
	}
	seed := []byte(strings.TrimSpace(string(raw)))
	p, closeFn, err := f.producer(g)
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	job, rec, err := shellexec.Decide(ctx, p, id, v, seed, &shellexec.DecideOpts{
		Always: f.always, Reason: f.reason, Submit: &producer.SubmitOpts{Progress: true},
	})
	if errors.Is(err, producer.ErrNoApproval) {
		return contracts.Errorf(contracts.CodeInvalidInput, "approval %s is unknown or expired", id)
	}
	if err != nil {
		return err
	}
	if !g.jsonOut {
		a := &rec.Approval
		fmt.Fprintf(g.stderr, "%s %s: %s\n  argv:    %v\n  host:    %s\n  workdir: %s\n  reason:  %s\n",
			v, a.ID, a.Plan.Command, a.Plan.Argv, a.Plan.Host, orNone(a.Plan.Workdir), a.Reason)
	}
	// The decide job says "applied" with a progress event as soon as the
	// exec job moved on, and completes once an approved command has run.
	var got *contracts.Event
	err = p.ReadEvents(ctx, job.Session, &producer.ReadOpts{Follow: true, JobID: job.ID}, func(ev *contracts.Event) error {
		if ev.Data.Status == contracts.StatusProgress || ev.Data.Status.Terminal() {
			got = ev
			return producer.ErrStop
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("waiting for decision %s: %w", job.ID, err)
	}
	if got.Data.Status == contracts.StatusFailed || got.Data.Status == contracts.StatusCancelled {
		if g.jsonOut {
			_ = g.printJSON(got)
		}
		if got.Data.Error != nil {
			return fmt.Errorf("decision not accepted: %w", got.Data.Error)
		}
		return fmt.Errorf("decision %s", got.Data.Status)
	}
	var res shellexec.DecideResult
	if err := json.Unmarshal(got.Data.Result, &res); err != nil {
		return fmt.Errorf("decision result: %w", err)
	}
	if !res.Applied {
		if g.jsonOut {
			_ = g.printJSON(res)
		}
		return fmt.Errorf("approval %s was already %s: decision ignored", id, res.Status)
	}
	if !f.wait || v != shell.Approve {
		if g.jsonOut {
			return g.printJSON(res)
		}
		fmt.Fprintf(g.stdout, "%s %s (job %s in session %s)\n", res.Status, res.ApprovalID, res.JobID, res.Session)
		return nil
	}
	ev, err := p.Await(ctx, res.Session, res.JobID, nil)
	if err != nil {
		return fmt.Errorf("waiting for job %s: %w", res.JobID, err)
	}
	if err := g.printJSON(ev); err != nil {
		return err
	}
	if ev.Data.Status != contracts.StatusCompleted {
		return fmt.Errorf("job %s %s", res.JobID, ev.Data.Status)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(private scratch directory)"
	}
	return s
}
