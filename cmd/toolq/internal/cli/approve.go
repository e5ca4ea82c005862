package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

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
	yes      bool
	expect   string
}

func newApproveCmd(g *globals) *cobra.Command {
	f := &decideFlags{}
	cmd := &cobra.Command{
		Use:   "approve APPROVAL_ID",
		Short: "Approve an exec command waiting for a person (signed with your approver nkey)",
		Long: `approve reads the approval and prints its whole plan (command, argv,
workdir, env, host, timeout, shell script and plan hash) before anything is
signed. On a terminal it then asks for confirmation; without one it refuses
unless --yes or --expect-hash is given. --expect-hash HASH (the hash of the
approval_pending event) approves only that exact plan and fails otherwise.
The decision signs the plan hash with your approver nkey seed; the worker
accepts it only from a configured approver, once.
With --always the exact argv of the command's simple commands is added to
the shared allowlist (printed before signing), so the same command runs
without asking next time.

A tenant's approver logs in with the tenant's credentials and
--tenant-account: the plan is then read from the job's approval_pending
event among the tenant's own events, and the decision, signed for the
tenant, goes through the tenant's import. The worker accepts it only from
an approver of the tenant's record (tenant register --approver); --always
is for the default tenant only (it changes the fleet-wide allowlist).`,
		Example: `  toolq approve 3Yx9kq2 --seed-file ~/.toolq/approver.seed
  toolq approve 3Yx9kq2 --always --wait
  toolq approve 3Yx9kq2 --expect-hash 9f2c…  # scripts: the hash from the approval_pending event`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return decide(cmd, g, args[0], shell.Approve, f)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&f.always, "always", false, "also allowlist exactly this command's argv, fleet-wide (what is added is printed before signing)")
	cmd.Flags().BoolVar(&f.wait, "wait", false, "wait for the approved command to finish and print its final event")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "approve without asking for confirmation (the plan is still printed)")
	cmd.Flags().StringVar(&f.expect, "expect-hash", "", "approve only if the approval's plan hash is HASH (for scripts; implies no confirmation prompt)")
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
			return decide(cmd, g, args[0], shell.Reject, f)
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
	// A decision answers an approval a serving exec worker made, and the
	// approver role may not read consumers: no served check.
	p, err := producer.New(nc, &producer.Config{
		Subjects: g.subjects(), Session: f.session, Timeout: g.timeout, Logger: g.log,
		TenantAccount: g.tenantAccount, SubmitUnserved: true,
	})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return p, func() { p.Close(); nc.Close() }, nil
}

// decide signs and submits a decision, then reports what it did: the exec
// job's approved or denied event, or why the worker refused it.
func decide(cmd *cobra.Command, g *globals, id string, v shell.Verdict, f *decideFlags) error {
	ctx := cmd.Context()
	if err := f.resolveSeed(g); err != nil {
		return err
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
	lctx, lcancel := context.WithTimeout(ctx, g.timeout)
	rec, err := shellexec.LoadApproval(lctx, p, id)
	lcancel()
	if errors.Is(err, producer.ErrNoApproval) {
		return contracts.Errorf(contracts.CodeInvalidInput, "approval %s is unknown or expired", id)
	}
	if err != nil {
		return err
	}
	// Nothing is signed before the person has seen what would run.
	a := &rec.Approval
	if a.Plan.Hash() != a.Hash {
		return contracts.Errorf(contracts.CodeDenied, "approval %s: its plan does not match its hash %s; not signed", id, a.Hash)
	}
	if a.Tenant != "" && f.always {
		return contracts.Errorf(contracts.CodeInvalidInput, "approval %s is tenant %s's: --always changes the allowlist of every tenant and is for the default tenant's approvers only", id, a.Tenant)
	}
	g.tell("%s", describePlan(v, rec))
	if v == shell.Approve && f.always {
		g.tell("--always: %s", indent(shell.AlwaysEntries(shell.Policy{}, &a.Plan).String()))
	}
	if v == shell.Approve {
		if err := confirm(cmd, g, f, a.Hash); err != nil {
			return err
		}
	}
	// The person may have taken a while; the timeout starts now.
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	job, err := shellexec.DecideRecord(ctx, p, rec, v, seed, &shellexec.DecideOpts{
		Always: f.always, Reason: f.reason, Submit: &producer.SubmitOpts{Progress: true},
	})
	if err != nil {
		return err
	}
	// The decide job says "applied" with a progress event as soon as the
	// exec job moved on, and completes once an approved command has run.
	// Await works on a tenant account too, where ReadEvents does not.
	got, err := p.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Progress: true})
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
		return endedErr("job", res.JobID, ev.Data.Status, ev.Data.Error)
	}
	return nil
}

// confirm decides whether an approval may be signed: --expect-hash must
// match the plan's hash; otherwise --yes, or a "y" typed on a terminal.
func confirm(cmd *cobra.Command, g *globals, f *decideFlags, hash string) error {
	if f.expect != "" {
		if !strings.EqualFold(strings.TrimSpace(f.expect), hash) {
			return contracts.Errorf(contracts.CodeDenied, "plan hash is %s, not the expected %s: not approved", hash, f.expect)
		}
		return nil
	}
	if f.yes {
		return nil
	}
	in := cmd.InOrStdin()
	if !isTerminal(in) {
		return contracts.Errorf(contracts.CodeInvalidInput, "no terminal to confirm on: pass --yes, or --expect-hash with the plan hash shown above")
	}
	fmt.Fprint(g.stderr, "Approve and sign this plan? [y/N] ")
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		return contracts.Errorf(contracts.CodeDenied, "not confirmed: not approved")
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return contracts.Errorf(contracts.CodeDenied, "not confirmed: not approved")
}

// isTerminal reports whether r is a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS) //nolint:gosec // G115: a descriptor fits an int
	return err == nil
}

// describePlan shows everything the plan hash binds, one field a line, with
// text from the job quoted so control characters cannot hide anything.
func describePlan(v shell.Verdict, rec *shellexec.Record) string {
	a := &rec.Approval
	pl := &a.Plan
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s\n", v, a.ID, shown(pl.Command))
	if a.Tenant != "" {
		fmt.Fprintf(&b, "  %-9s %s\n", "tenant:", a.Tenant)
	}
	for i, argv := range pl.Argv {
		label := "argv:"
		if i > 0 {
			label = ""
		}
		words := make([]string, len(argv))
		for j, w := range argv {
			words[j] = shown(w)
		}
		fmt.Fprintf(&b, "  %-9s %s\n", label, strings.Join(words, " "))
	}
	fmt.Fprintf(&b, "  %-9s %s\n", "workdir:", orNone(pl.Workdir))
	if len(pl.Env) == 0 {
		fmt.Fprintf(&b, "  %-9s (no overrides)\n", "env:")
	}
	keys := make([]string, 0, len(pl.Env))
	for k := range pl.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		label := "env:"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(&b, "  %-9s %s=%s\n", label, shown(k), strconv.Quote(pl.Env[k]))
	}
	fmt.Fprintf(&b, "  %-9s %s\n", "host:", pl.Host)
	fmt.Fprintf(&b, "  %-9s %s\n", "timeout:", time.Duration(pl.TimeoutMs)*time.Millisecond)
	fmt.Fprintf(&b, "  %-9s %s -c %s\n", "runs:", shown(pl.Shell), strconv.Quote(pl.Script))
	if rec.Background {
		fmt.Fprintf(&b, "  %-9s yes\n", "background:")
	}
	fmt.Fprintf(&b, "  %-9s %s\n", "reason:", shown(a.Reason))
	fmt.Fprintf(&b, "  %-9s %s\n", "expires:", a.ExpiresAt.Local().Format(time.RFC3339))
	fmt.Fprintf(&b, "  %-9s %s\n", "hash:", a.Hash)
	return b.String()
}

// shown returns s as is when it is plain printable text, else quoted.
func shown(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || r == '"' || r == '\\' {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }

func orNone(s string) string {
	if s == "" {
		return "(private scratch directory)"
	}
	return s
}

// devSeedPath is where `toolq dev` keeps the approver seed it generates,
// relative to the directory it was started in.
var devSeedPath = filepath.Join(".toolq", "dev", "approver.seed")

// resolveSeed finds the approver seed when --seed-file and
// TOOLQ_APPROVER_SEED_FILE name none: the dev seed of the nearest
// directory, from here up, where `toolq dev` ran.
func (f *decideFlags) resolveSeed(g *globals) error {
	if f.seedFile != "" {
		return nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return contracts.Errorf(contracts.CodeInvalidInput, "--seed-file is required (or TOOLQ_APPROVER_SEED_FILE): %v", err)
	}
	for {
		path := filepath.Join(dir, devSeedPath)
		if _, err := os.Stat(path); err == nil {
			f.seedFile = path
			g.tell("signing with the dev approver seed %s", path)
			return nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return contracts.Errorf(contracts.CodeInvalidInput,
				"no approver seed: give --seed-file (or TOOLQ_APPROVER_SEED_FILE), or run this under the directory where `toolq dev` keeps %s", devSeedPath)
		}
		dir = parent
	}
}
