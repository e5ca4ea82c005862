package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tooldefs"
)

// surfaceFlags say which tools a model is given (tools export, mcp serve).
type surfaceFlags struct {
	codeMode  string
	model     string
	preferred []string
	shellExec bool
}

func (f *surfaceFlags) register(fs *pflag.FlagSet, codeModeDefault string) {
	fs.StringVar(&f.codeMode, "code-mode", codeModeDefault,
		"auto, true or false: true gives the model code_mode_exec and code_mode_wait (plus direct-only tools), false the catalog's tools directly, auto true only for a --model listed in --preferred-models")
	fs.StringVar(&f.model, "model", "", "the model the definitions are for (with --code-mode auto)")
	fs.StringSliceVar(&f.preferred, "preferred-models", nil, "models that prefer code mode: names, or prefixes ending in * (with --code-mode auto)")
	fs.BoolVar(&f.shellExec, "codemode-exec", false, "the workers let code-mode runs call the shell exec tool (worker --codemode-exec): list it in the quick index")
}

// surface reads the catalog (the workers' tools; a tenant account cannot
// read it, and gets code mode's tools with an index that says so) and
// builds the model-facing surface.
func (f *surfaceFlags) surface(ctx context.Context, g *globals, nc *nats.Conn) (*tooldefs.Surface, error) {
	cfg := &tooldefs.Config{CodeMode: f.codeMode, Model: f.model, PreferredModels: f.preferred, ShellExec: f.shellExec}
	var entries []contracts.CatalogTool
	if g.tenantAccount {
		g.logger().Warn("a tenant account cannot read the catalog: only code mode's tools and no quick index")
	} else {
		var err error
		if entries, err = readCatalog(ctx, nc, g.subjects()); err != nil {
			return nil, err
		}
	}
	s, err := tooldefs.Build(entries, cfg)
	if err != nil {
		return nil, err
	}
	for _, skipped := range s.Skipped {
		g.logger().Warn("catalog entry left out", slog.String("entry", skipped))
	}
	return s, nil
}

// readCatalog returns the workers' tools of the catalog bucket: the
// entries under plain keys that are stored under their own id's key. A
// tenant's client tools (t.<tenant>. keys) are the tenant's, not the
// workers'.
func readCatalog(ctx context.Context, nc *nats.Conn, subjects contracts.Subjects) ([]contracts.CatalogTool, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, subjects.CatalogBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("no catalog bucket %s: start a worker or `toolq dev` first", subjects.CatalogBucket())
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var out []contracts.CatalogTool
	for key := range lister.Keys() {
		if tenant, _, ok := contracts.ParseCatalogKey(key); !ok || tenant != "" {
			continue
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // removed since listed
		}
		if err != nil {
			return nil, fmt.Errorf("catalog %s: %w", key, err)
		}
		var t contracts.CatalogTool
		if json.Unmarshal(e.Value(), &t) != nil || contracts.CatalogKey(t.ID) != key {
			continue // Build would refuse it too; it is not under its own key
		}
		if t.Expired(e.Created(), time.Now()) || !t.VisibleTo("") {
			continue // no worker has served it within its TTL, or it is kept to named tenants
		}
		out = append(out, t)
	}
	return out, nil
}

func newToolsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "tools", Short: "The definitions of toolq's tools that a model is given"}
	cmd.AddCommand(newToolsExportCmd(g))
	return cmd
}

func newToolsExportCmd(g *globals) *cobra.Command {
	var (
		sf     surfaceFlags
		format string
	)
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print the tool definitions to give a model, in one provider's format",
		Long: `Print the definitions of the tools a model is given, as the tools array of
one provider's request (` + strings.Join(tooldefs.Formats, ", ") + `), made from the
schemas the workers validate with and the tools the workers wrote to the catalog.

With --code-mode true the model gets code_mode_exec (its description lists a
bounded quick index of the catalog) and code_mode_wait, plus the catalog's
direct-only tools; with false, the catalog's tools directly (code_execution,
exec, MCP servers' tools, ...). Names are the bus tools with dots as
underscores (code_mode.exec is code_mode_exec): submit a call the model made
with toolq submit --tool <bus tool>.`,
		Example: `  toolq tools export --format anthropic --code-mode true
  toolq tools export --format openai --model gpt-5 --preferred-models 'gpt-5*'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains(tooldefs.Formats, format) {
				return contracts.Errorf(contracts.CodeInvalidInput, "--format %q: want one of %s", format, strings.Join(tooldefs.Formats, ", "))
			}
			nc, err := g.connect("toolq tools export")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			s, err := sf.surface(ctx, g, nc)
			if err != nil {
				return err
			}
			out, err := tooldefs.Format(s, format)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(g.stdout, string(out))
			return err
		},
	}
	cmd.Flags().StringVar(&format, "format", tooldefs.FormatOpenAI, "the request format: "+strings.Join(tooldefs.Formats, ", "))
	sf.register(cmd.Flags(), tooldefs.CodeModeAuto)
	return cmd
}
