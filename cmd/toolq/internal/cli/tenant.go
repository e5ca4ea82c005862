package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

func newTenantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Manage the tenants of a multi-tenant bus (deploy/nats/tenants.conf)",
	}
	cmd.AddCommand(newTenantAddCmd(g), newTenantRegisterCmd(g), newTenantLsCmd(g), newTenantRmCmd(g), newTenantJWTCmd(g))
	return cmd
}

// tenantBus connects to the toolq account (as a worker or an operator user
// of it) for the commands that change which tenants workers serve.
func (g *globals) tenantBus() (jetstream.JetStream, func(), error) {
	nc, err := g.connect("toolq tenant")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

func newTenantRegisterCmd(g *globals) *cobra.Command {
	var (
		limit     int64
		weight    int
		approvers []string
	)
	cmd := &cobra.Command{
		Use:   "register NAME",
		Short: "Give a tenant its jobs stream and have every worker with --tenants serve it",
		Long: `register makes tenant NAME's jobs stream in the toolq account and writes
its record to the tenants bucket; workers started with --tenants follow the
bucket and serve the tenant within moments. Until then the tenant's submits
are refused ("no stream takes …"). Run it as a user of the toolq account
once the server runs with the tenant's account entry (tenant add). Running
it again replaces the tenant's queue limit, weight and approvers.

--approver names a public nkey whose signed decisions approve or deny the
tenant's exec commands (repeatable). A tenant without approvers has its
commands that need approval denied when they time out; the workers' own
approvers decide for tenants only with worker --approvers-for-tenants.`,
		Example: `  TOOLQ_NATS_USER=worker TOOLQ_NATS_PASSWORD=… toolq tenant register ACME --queue-limit 50000 --approver UABC…`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := validTenantName(name); err != nil {
				return err
			}
			if limit < 0 {
				return fmt.Errorf("tenant register: --queue-limit %d is negative", limit)
			}
			if weight < 1 || weight > contracts.MaxTenantWeight {
				return contracts.Errorf(contracts.CodeInvalidInput, "tenant register: --weight %d out of range [1, %d]", weight, contracts.MaxTenantWeight)
			}
			if err := bus.CheckApprovers(approvers); err != nil {
				return contracts.Errorf(contracts.CodeInvalidInput, "tenant register: --approver: %v", err)
			}
			js, done, err := g.tenantBus()
			if err != nil {
				return err
			}
			defer done()
			rec := contracts.TenantRecord{Name: name, QueueLimit: limit, Approvers: approvers, Weight: weight}
			if err := bus.AddTenant(cmd.Context(), js, bus.Config{Subjects: g.subjects()}, rec); err != nil {
				return fmt.Errorf("tenant register: %w", err)
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"tenant": name, "stream": g.subjects().TenantJobsStream(name), "registered": true, "approvers": len(approvers)})
			}
			_, err = fmt.Fprintf(g.stdout, "tenant %s registered: jobs stream %s, %d exec approvers\n", name, g.subjects().TenantJobsStream(name), len(approvers))
			return err
		},
	}
	cmd.Flags().Int64Var(&limit, "queue-limit", 0, "queued and running jobs of the tenant over all tools (0: the workers' default, 10000)")
	cmd.Flags().IntVar(&weight, "weight", 1, "the tenant's share of each worker's slots of a tool while tenants contend for them, relative to the others' (1-100)")
	cmd.Flags().StringArrayVar(&approvers, "approver", nil, "public nkey (U… or A…) of a person who approves the tenant's exec commands; repeatable")
	return cmd
}

func newTenantLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the registered tenants with their queued jobs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			js, done, err := g.tenantBus()
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			kv, err := js.KeyValue(ctx, g.subjects().TenantsBucket())
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				kv = nil
			} else if err != nil {
				return fmt.Errorf("tenant ls: %w", err)
			}
			type row struct {
				contracts.TenantRecord
				Queued uint64 `json:"queued"`
			}
			rows := []row{}
			if kv != nil {
				keys, err := kv.ListKeys(ctx)
				if err != nil {
					return fmt.Errorf("tenant ls: %w", err)
				}
				for key := range keys.Keys() {
					e, err := kv.Get(ctx, key)
					if err != nil {
						continue // removed meanwhile
					}
					rec, err := bus.DecodeTenant(key, e.Value())
					if err != nil {
						g.log.Warn("tenant record refused", "tenant", key, "err", err)
						continue
					}
					r := row{TenantRecord: rec}
					if st, err := js.Stream(ctx, g.subjects().TenantJobsStream(key)); err == nil {
						r.Queued = st.CachedInfo().State.Msgs
					}
					rows = append(rows, r)
				}
			}
			if g.jsonOut {
				return g.printJSON(rows)
			}
			if len(rows) == 0 {
				_, err = fmt.Fprintln(g.stdout, "no tenants registered (toolq tenant register NAME)")
				return err
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tQUEUED\tQUEUE LIMIT\tWEIGHT\tAPPROVERS\tADDED")
			for _, r := range rows {
				limit := "default"
				if r.QueueLimit > 0 {
					limit = strconv.FormatInt(r.QueueLimit, 10)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\n", r.Name, r.Queued, limit, max(r.Weight, 1), len(r.Approvers), r.Added.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
}

func newTenantRmCmd(g *globals) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Stop serving a tenant and delete its jobs stream with every job still queued",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := validTenantName(name); err != nil {
				return err
			}
			if !yes {
				return fmt.Errorf("tenant rm: this deletes %s's queued jobs; say --yes", name)
			}
			js, done, err := g.tenantBus()
			if err != nil {
				return err
			}
			defer done()
			if err := bus.RemoveTenant(cmd.Context(), js, g.subjects(), name); err != nil {
				return fmt.Errorf("tenant rm: %w", err)
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"tenant": name, "removed": true})
			}
			_, err = fmt.Fprintf(g.stdout, "tenant %s removed\n", name)
			return err
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "delete the tenant's queued jobs")
	return cmd
}

func newTenantAddCmd(g *globals) *cobra.Command {
	var (
		out       string
		approvers []string
	)
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Make a tenant: print its NATS account entry and write its agent's nkey seed",
		Long: `add makes a tenant's agent user (a fresh nkey pair), writes the user's
seed to --out/NAME.nk (mode 0600) and prints the tenant's account entry for
the accounts block of deploy/nats/tenants.conf. The entry imports only the
subjects whose tenant token is NAME; the server accepts those imports only
for an account called NAME, so the entry cannot be edited into reading
another tenant. The toolq account needs no change.

--approver adds a user with the TENANT_APPROVER role for a person's public
user nkey (repeatable): it may publish exec decisions and read the tenant's
events, nothing else. Give the same key to tenant register --approver, so
that workers accept the person's signature for this tenant.

Once the server runs with the entry, register the tenant (tenant register)
so that workers serve it. The tenant's clients log in with the seed and
--tenant-account:
  toolq --nkey-seed NAME.nk --tenant-account submit --tool noop --wait`,
		Example: `  toolq tenant add ACME --out ./secrets >> tenants.d/acme.conf
  toolq tenant add ACME --out ./secrets --approver UABC… >> tenants.d/acme.conf`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			name := args[0]
			if err := validTenantName(name); err != nil {
				return err
			}
			for _, k := range approvers {
				if !nkeys.IsValidPublicUserKey(k) {
					return contracts.Errorf(contracts.CodeInvalidInput, "tenant add: --approver %q is not a public user nkey (U…)", k)
				}
			}
			path := filepath.Join(out, name+".nk")
			pub, err := writeUserSeed(path)
			if err != nil {
				return fmt.Errorf("tenant add: %w", err)
			}
			g.log.Info("tenant agent seed written", "tenant", name, "file", path, "user", pub)
			if g.jsonOut {
				return g.printJSON(map[string]any{"tenant": name, "user": pub, "seedFile": path, "accountEntry": tenantAccount(g.subjects(), name, pub, approvers)})
			}
			_, err = fmt.Fprint(g.stdout, tenantAccount(g.subjects(), name, pub, approvers))
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", ".", "directory for the agent's seed file NAME.nk")
	cmd.Flags().StringArrayVar(&approvers, "approver", nil, "public user nkey (U…) of the tenant's exec approver, added as a TENANT_APPROVER user; repeatable")
	return cmd
}

// validTenantName accepts an id ([A-Za-z0-9_-], it becomes a subject
// token) that is no account the server or toolq keeps for itself.
func validTenantName(name string) error {
	if err := contracts.ValidateID("tenant name", name); err != nil {
		return err
	}
	switch strings.ToUpper(name) {
	case "TOOLQ", "SYS", "$SYS", "$G":
		return errors.New("tenant name " + name + " is reserved")
	}
	return nil
}

// tenantAccount is the account entry of tenant with one agent user and
// its approver users: its imports of its own subspace of the toolq
// account, under the plain names.
func tenantAccount(s contracts.Subjects, tenant, userKey string, approverKeys []string) string {
	var b strings.Builder
	root := s.TenantRoot(tenant)
	cancels := contracts.KVSubject(s.CancelsBucket(), "")
	catalog := contracts.KVSubject(s.CatalogBucket(), "")
	direct := "$JS.API.DIRECT.GET." + s.EventsStream() + "."
	imports := [][2]string{
		{root + ".jobs.>", s.Jobs()},
		{root + ".cancel.*", s.Cancels()},
		{cancels + tenant + ".*", cancels + "*"},
		{catalog + "t." + tenant + ".client.>", catalog + "client.>"},
		{root + ".replay.*", s.Replay("*")},
		{direct + root + ".events.>", direct + s.Events()},
	}
	fmt.Fprintf(&b, "  # tenant %s\n  %s {\n    users = [\n", tenant, tenant)
	fmt.Fprintf(&b, "      { nkey = %q, permissions = $TENANT_AGENT }\n", userKey)
	for _, k := range approverKeys {
		fmt.Fprintf(&b, "      { nkey = %q, permissions = $TENANT_APPROVER }\n", k)
	}
	b.WriteString("    ]\n    imports = [\n")
	for _, im := range imports {
		fmt.Fprintf(&b, "      { service = { account = TOOLQ, subject = %q }, to = %q }\n", im[0], im[1])
	}
	fmt.Fprintf(&b, "      { stream = { account = TOOLQ, subject = %q }, to = %q }\n    ]\n  }\n",
		root+".events.>", s.Events())
	return b.String()
}
