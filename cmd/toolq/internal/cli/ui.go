package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/cmd/toolq/internal/ui"
)

// uiFlags are the web console's flags: --listen and --token-file of
// `toolq ui`, --ui-listen and --ui-token-file of `toolq dev`.
type uiFlags struct {
	listen, tokenFile string
	tokenFlag         string
}

func (f *uiFlags) register(cmd *cobra.Command, prefix, more string) {
	f.tokenFlag = "--" + prefix + "token-file"
	cmd.Flags().StringVar(&f.listen, prefix+"listen", ui.DefaultListen,
		"web console address (a bare PORT binds 127.0.0.1; any other than a loopback one needs a token)"+more)
	cmd.Flags().StringVar(&f.tokenFile, prefix+"token-file", "",
		fmt.Sprintf("file with the web console's access token (at least %d bytes; or env TOOLQ_UI_TOKEN); required for a non-loopback address", minTokenBytes))
}

// start makes and starts the console on nc, an operator's connection;
// seedHint is where dev keeps its approver seed ("" for none).
func (f *uiFlags) start(ctx context.Context, g *globals, nc *nats.Conn, seedHint string) (*ui.Server, error) {
	token, err := readToken(f.tokenFlag, f.tokenFile, "TOOLQ_UI_TOKEN")
	if err != nil {
		return nil, err
	}
	srv, err := ui.New(nc, &ui.Config{Subjects: g.subjects(), Listen: f.listen, Token: token, Timeout: g.timeout, SeedHint: seedHint, Logger: g.logger()})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	return srv, nil
}

// stopUI stops the console, giving its requests a few seconds.
func stopUI(srv *ui.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Stop(ctx)
}

func newUICmd(g *globals) *cobra.Command {
	f := &uiFlags{}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web console: jobs, runs, approvals, dead letters, schedules, breakers (operator)",
		Long: `ui serves the web console on --listen (127.0.0.1:8470 by default): jobs
with their event timelines and results, code-mode runs, exec approvals with
their whole plan, dead letters (requeue, purge), schedules (add, pause,
resume, remove) and provider breakers, updated live from NATS.

Approvals are signed in the browser with your own approver nkey seed,
which never leaves the page; the console relays the signed decision as
toolq approve does (a tenant's approval on that tenant's decide subject),
and the exec worker alone decides whether to trust it.

It is an operator surface: it connects with the toolq account's
credentials (like dlq and jobs ls) and shows every tenant, with a tenant
filter; a tenant's credentials are refused. Any address other than a
loopback one needs a token (--token-file or TOOLQ_UI_TOKEN); the browser
logs in with it once.`,
		Example: `  toolq ui
  toolq ui --listen 0.0.0.0:8470 --token-file /run/secrets/console-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			nc, _, err := g.operatorBus(ctx, "ui")
			if err != nil {
				return err
			}
			defer nc.Close()
			srv, err := f.start(ctx, g, nc, "")
			if err != nil {
				return err
			}
			defer stopUI(srv)
			if g.jsonOut {
				g.logger().Info("toolq console ready", slog.String("url", srv.URL()))
			} else {
				fmt.Fprintf(g.stderr, "toolq ui: web console at %s\n", srv.URL())
			}
			<-ctx.Done()
			return nil
		},
	}
	f.register(cmd, "", "")
	return cmd
}
