package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
)

func newTenantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Manage the tenants of a multi-tenant bus (deploy/nats/tenants.conf)",
	}
	cmd.AddCommand(newTenantAddCmd(g))
	return cmd
}

func newTenantAddCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Make a tenant: print its NATS account entry and write its agent's nkey seed",
		Long: `add makes a tenant's agent user (a fresh nkey pair), writes the user's
seed to --out/NAME.nk (mode 0600) and prints the tenant's account entry for
the accounts block of deploy/nats/tenants.conf. The entry imports only the
subjects whose tenant token is NAME; the server accepts those imports only
for an account called NAME, so the entry cannot be edited into reading
another tenant. The toolq account needs no change.

The tenant's clients log in with the seed and --tenant-account:
  toolq --nkey-seed NAME.nk --tenant-account submit --tool noop --wait`,
		Example: `  toolq tenant add ACME --out ./secrets >> tenants.d/acme.conf`,
		Args:    cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			name := args[0]
			if err := validTenantName(name); err != nil {
				return err
			}
			kp, err := nkeys.CreateUser()
			if err != nil {
				return fmt.Errorf("tenant add: %w", err)
			}
			pub, err := kp.PublicKey()
			if err != nil {
				return fmt.Errorf("tenant add: %w", err)
			}
			seed, err := kp.Seed()
			if err != nil {
				return fmt.Errorf("tenant add: %w", err)
			}
			path := filepath.Join(out, name+".nk")
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // G304: the operator names the directory
			if err != nil {
				return fmt.Errorf("tenant add: seed file: %w", err)
			}
			_, err = f.Write(append(seed, '\n'))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("tenant add: seed file: %w", err)
			}
			g.log.Info("tenant agent seed written", "tenant", name, "file", path, "user", pub)
			_, err = fmt.Fprint(g.stdout, tenantAccount(g.subjects(), name, pub))
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", ".", "directory for the agent's seed file NAME.nk")
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

// tenantAccount is the account entry of tenant with one agent user: its
// imports of its own subspace of the toolq account, under the plain names.
func tenantAccount(s contracts.Subjects, tenant, userKey string) string {
	var b strings.Builder
	root := s.TenantRoot(tenant)
	cancels := contracts.KVSubject(s.CancelsBucket(), "")
	direct := "$JS.API.DIRECT.GET." + s.EventsStream() + "."
	imports := [][2]string{
		{root + ".jobs.>", s.Jobs()},
		{root + ".cancel.*", s.Cancels()},
		{cancels + tenant + ".*", cancels + "*"},
		{direct + root + ".events.>", direct + s.Events()},
	}
	fmt.Fprintf(&b, "  # tenant %s\n  %s {\n    users = [\n", tenant, tenant)
	fmt.Fprintf(&b, "      { nkey = %q, permissions = $TENANT_AGENT }\n    ]\n    imports = [\n", userKey)
	for _, im := range imports {
		fmt.Fprintf(&b, "      { service = { account = TOOLQ, subject = %q }, to = %q }\n", im[0], im[1])
	}
	fmt.Fprintf(&b, "      { stream = { account = TOOLQ, subject = %q }, to = %q }\n    ]\n  }\n",
		root+".events.>", s.Events())
	return b.String()
}
