package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/tenantjwt"
)

func newTenantJWTCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jwt",
		Short: "Tenants in NATS operator (JWT) mode: the operator, the toolq account and one account per tenant",
		Long: `jwt makes, with the nats-io jwt and nkeys libraries, what a NATS server in
operator mode needs to serve toolq's tenants: init makes the operator, the
system account, the toolq account (the exports of deploy/nats/tenants.conf)
with its worker, scheduler and approver users, and the server
configuration; add makes one tenant's account and agent user. In this mode
the tenant id is the account's public key: register the tenant under it.
Everything is written to --dir: seeds and credentials mode 0600.`,
	}
	cmd.AddCommand(newTenantJWTInitCmd(g), newTenantJWTAddCmd(g))
	return cmd
}

func newTenantJWTInitCmd(g *globals) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Make the operator, the system and toolq accounts, toolq's users and server.conf in --dir",
		Example: `  toolq tenant jwt init --dir ./operator
  nats-server -c ./operator/server.conf -js
  toolq --creds ./operator/creds/worker.creds worker --tenants`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if dir == "" {
				return contracts.Errorf(contracts.CodeInvalidInput, "tenant jwt init: --dir is required")
			}
			cfg := &tenantjwt.Config{Dir: dir, Subjects: g.subjects()}
			setup, err := tenantjwt.Init(cfg)
			if err != nil {
				return fmt.Errorf("tenant jwt init: %w", err)
			}
			creds := filepath.Join(dir, "creds")
			if g.jsonOut {
				return g.printJSON(map[string]any{
					"operator": setup.Operator, "system_account": setup.System, "toolq_account": setup.Toolq,
					"approver": setup.Approver, "server_conf": setup.ServerConf, "creds": creds,
				})
			}
			_, err = fmt.Fprintf(g.stdout, `operator        %s
system account  %s
toolq account   %s
approver nkey   %s (its seed: %s)
server config   %s
credentials     %s: worker, scheduler, approver, sys
`, setup.Operator, setup.System, setup.Toolq, setup.Approver,
				filepath.Join(dir, "keys", "approver.nk"), setup.ServerConf, creds)
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the operator's keys, JWTs, credentials and server.conf (required)")
	return cmd
}

func newTenantJWTAddCmd(g *globals) *cobra.Command {
	var (
		dir       string
		push      bool
		approvers []string
	)
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Make a tenant's account (imports of its own subspace) and agent user; print the tenant id",
		Long: `add makes tenant NAME's account, signed by the operator's signing key of
--dir: it imports the subjects of the toolq account whose tenant token is
the account's own public key, and nothing else; the server grants those
imports to no other account. It writes the account JWT to the resolver's
store (--dir/jwt, where a server finds a new account when its first user
connects) and the agent's credentials to --dir/creds/NAME-agent.creds.
--push also sends the JWT to the running servers ($SYS.REQ.CLAIMS.UPDATE),
logging in as a system account user (--creds DIR/creds/sys.creds).

--approver UKEY issues a user JWT of the tenant's account with the
TENANT_APPROVER permissions for a person's public nkey, written to
--dir/creds/NAME-approver-UKEY.jwt; the person logs in with it and their
own seed (nats.UserJWTAndSeed, or a creds file of the two) and signs
decisions with the same seed. Give the key to tenant register --approver.

The tenant id printed is the account's public key: register it (tenant
register ID, as a user of the toolq account) so that workers serve it.`,
		Example: `  toolq tenant jwt add ACME --dir ./operator
  toolq --creds ./operator/creds/sys.creds tenant jwt add GLOBEX --dir ./operator --push
  toolq --creds ./operator/creds/worker.creds tenant register ABC…XYZ`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return contracts.Errorf(contracts.CodeInvalidInput, "tenant jwt add: --dir is required")
			}
			cfg := &tenantjwt.Config{Dir: dir, Subjects: g.subjects()}
			tn, err := tenantjwt.AddTenant(cfg, args[0], &tenantjwt.AddOpts{Approvers: approvers})
			if err != nil {
				return fmt.Errorf("tenant jwt add: %w", err)
			}
			g.log.Info("tenant account made", "tenant", tn.Name, "account", tn.Account, "creds", tn.Creds)
			if push {
				nc, err := g.connect("toolq tenant jwt")
				if err != nil {
					return fmt.Errorf("tenant jwt add: %w", err)
				}
				defer nc.Close()
				if err := tenantjwt.Push(cmd.Context(), nc, g.subjects(), tn.JWT); err != nil {
					return fmt.Errorf("tenant jwt add: account %s is in %s but not on the server: %w", tn.Account, dir, err)
				}
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{
					"tenant": tn.Account, "name": tn.Name, "creds": tn.Creds, "approvers": tn.Approvers, "pushed": push,
					"stream": g.subjects().TenantJobsStream(tn.Account),
				})
			}
			_, err = fmt.Fprintf(g.stdout, "%s\n", tn.Account)
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the directory of tenant jwt init (required)")
	cmd.Flags().StringArrayVar(&approvers, "approver", nil, "public user nkey (U…) of the tenant's exec approver, issued a TENANT_APPROVER user JWT; repeatable")
	cmd.Flags().BoolVar(&push, "push", false, "also send the account JWT to the running servers (log in as a system account user)")
	return cmd
}
