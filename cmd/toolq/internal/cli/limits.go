package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// The operator's rate limits: `toolq limits set|ls|rm` read and write the
// limits bucket, which every worker follows (RATIONALE "Rate limits").

func newLimitsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Rate limits of tools per tenant, and of providers' API keys, enforced across all workers (ls, set, rm)",
	}
	cmd.AddCommand(newLimitsSetCmd(g), newLimitsLsCmd(g), newLimitsRmCmd(g))
	return cmd
}

// limitsBucket opens (or makes) the limits bucket as the operator.
func (g *globals) limitsBucket(ctx context.Context, what string) (jetstream.KeyValue, func(), error) {
	nc, js, err := g.operatorBus(ctx, what)
	if err != nil {
		return nil, nil, err
	}
	kv, err := bus.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:       g.subjects().LimitsBucket(),
		Description:  "toolq rate limits (limit.*) and their state (tat.*)",
		History:      1,
		MaxValueSize: 1024,
		MaxBytes:     16 << 20,
	})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: limits bucket: %w", what, err)
	}
	return kv, nc.Close, nil
}

// providerFlags are the --provider and --key-id of set and rm: a limit of
// a provider's API keys instead of a tool's.
type providerFlags struct{ provider, keyID string }

func (f *providerFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.provider, "provider", "", "limit the requests made with the API keys of this code_execution provider (xai, openai, gemini, anthropic) instead of a tool's jobs")
	cmd.Flags().StringVar(&f.keyID, "key-id", "", "with --provider: only the key with this id (16 hex digits, as the worker logs it at start); default every key of the provider")
}

func (f *providerFlags) set() bool { return f.provider != "" || f.keyID != "" }

// check refuses what no worker would ever apply: a provider code_execution
// does not know (a typo would limit nothing), a key id without a provider.
func (f *providerFlags) check(tenant string) error {
	switch {
	case f.provider == "":
		return contracts.Errorf(contracts.CodeInvalidInput, "--key-id needs --provider")
	case !provider.Known(f.provider):
		return contracts.Errorf(contracts.CodeInvalidInput, "unknown provider %q (known: %s)", f.provider, strings.Join(provider.Names, ", "))
	case tenant != "":
		return contracts.Errorf(contracts.CodeInvalidInput, "a provider's limit has no --tenant: its API key is shared by every tenant whose jobs use it")
	case f.keyID != "" && !contracts.ValidKeyID(f.keyID):
		return contracts.Errorf(contracts.CodeInvalidInput, "--key-id %q: want %d lowercase hex digits", f.keyID, contracts.KeyIDLength)
	}
	return nil
}

func newLimitsSetCmd(g *globals) *cobra.Command {
	var (
		tenant string
		burst  int
		pf     providerFlags
	)
	cmd := &cobra.Command{
		Use:   "set TOOL RATE | set --provider NAME [--key-id ID] RATE",
		Short: "Limit how often jobs of TOOL start (e.g. 60/min), for the default tenant or --tenant, or the requests with a provider's API keys",
		Long: `set writes TOOL's rate limit: RATE is <count>/<s|min|h|duration> (60/min,
10/s, 5/30s), --burst how many may start at once after a quiet spell.
Every worker applies it within moments to the jobs it has not started yet;
jobs over the limit wait (they are not failed and spend no attempt).

With --provider it limits the requests code_execution makes with that
provider's API keys (each key apart), in place of the rateLimit of the
providers' configuration; --key-id narrows it to one key. A key is shared
by every tenant whose jobs use it.`,
		Example: `  toolq limits set code_execution 60/min --burst 10
  toolq limits set code_mode.exec 5/s --tenant ACME
  toolq limits set --provider xai 600/min --burst 20`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var lim contracts.RateLimit
			switch {
			case pf.set():
				if err := pf.check(tenant); err != nil {
					return err
				}
				if len(args) != 1 {
					return contracts.Errorf(contracts.CodeInvalidInput, "with --provider, set takes RATE only")
				}
				lim = contracts.RateLimit{Provider: pf.provider, KeyID: pf.keyID}
			case len(args) != 2:
				return contracts.Errorf(contracts.CodeInvalidInput, "set takes TOOL RATE (or --provider NAME RATE)")
			default:
				lim = contracts.RateLimit{Tool: args[0], Tenant: tenant}
			}
			rate, per, err := contracts.ParseRate(args[len(args)-1])
			if err != nil {
				return err
			}
			lim.Rate, lim.Per, lim.Burst = rate, per, burst
			if err := lim.Validate(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			kv, done, err := g.limitsBucket(ctx, "limits set")
			if err != nil {
				return err
			}
			defer done()
			data, err := json.Marshal(lim)
			if err != nil {
				return err
			}
			if _, err := kv.Put(ctx, lim.LimitKey(), data); err != nil {
				return fmt.Errorf("limits set: %w", err)
			}
			if g.jsonOut {
				return g.printJSON(lim)
			}
			_, err = fmt.Fprintf(g.stdout, "%s%s: %s\n", tenantPrefix(lim.Tenant), lim.Subject(), lim.String())
			return err
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant whose jobs of TOOL it limits (default: the default tenant)")
	cmd.Flags().IntVar(&burst, "burst", 1, "how many jobs (requests) may start at once after a quiet spell")
	pf.add(cmd)
	return cmd
}

func tenantPrefix(tenant string) string {
	if tenant == "" {
		return ""
	}
	return tenant + " "
}

func newLimitsLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the rate limits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			kv, done, err := g.limitsBucket(ctx, "limits ls")
			if err != nil {
				return err
			}
			defer done()
			keys, err := kv.ListKeysFiltered(ctx, "limit.>")
			if err != nil {
				return fmt.Errorf("limits ls: %w", err)
			}
			lims := []contracts.RateLimit{}
			for k := range keys.Keys() {
				e, err := kv.Get(ctx, k)
				if errors.Is(err, jetstream.ErrKeyNotFound) {
					continue
				}
				if err != nil {
					return fmt.Errorf("limits ls: %w", err)
				}
				lim, err := contracts.DecodeRateLimit(k, e.Value())
				if err != nil {
					g.tell("limits ls: %v", err)
					continue
				}
				lims = append(lims, *lim)
			}
			sort.Slice(lims, func(i, j int) bool {
				if lims[i].Tenant != lims[j].Tenant {
					return lims[i].Tenant < lims[j].Tenant
				}
				return lims[i].Subject() < lims[j].Subject()
			})
			if g.jsonOut {
				return g.printJSON(lims)
			}
			if len(lims) == 0 {
				_, err := fmt.Fprintln(g.stdout, "no rate limits (toolq limits set TOOL RATE)")
				return err
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tTOOL\tRATE")
			for _, l := range lims {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", operator.OrDash(l.Tenant), l.Subject(), l.String())
			}
			return tw.Flush()
		},
	}
}

func newLimitsRmCmd(g *globals) *cobra.Command {
	var (
		tenant string
		pf     providerFlags
	)
	cmd := &cobra.Command{
		Use:   "rm TOOL | rm --provider NAME [--key-id ID]",
		Short: "Remove TOOL's rate limit (of the default tenant or --tenant), or a provider's",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var lim contracts.RateLimit
			switch {
			case pf.set():
				if err := pf.check(tenant); err != nil {
					return err
				}
				if len(args) != 0 {
					return contracts.Errorf(contracts.CodeInvalidInput, "with --provider, rm takes no TOOL")
				}
				lim = contracts.RateLimit{Provider: pf.provider, KeyID: pf.keyID}
			case len(args) != 1:
				return contracts.Errorf(contracts.CodeInvalidInput, "rm takes TOOL (or --provider NAME)")
			default:
				if err := contracts.ValidateTool(args[0]); err != nil {
					return err
				}
				lim = contracts.RateLimit{Tool: args[0], Tenant: tenant}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			kv, done, err := g.limitsBucket(ctx, "limits rm")
			if err != nil {
				return err
			}
			defer done()
			key := lim.LimitKey()
			if _, err := kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
				return contracts.Errorf(contracts.CodeInvalidInput, "no rate limit for %s%s (toolq limits ls)", tenantPrefix(tenant), lim.Subject())
			}
			if err := kv.Delete(ctx, key); err != nil {
				return fmt.Errorf("limits rm: %w", err)
			}
			if g.jsonOut {
				out := map[string]any{"removed": true}
				if lim.Provider != "" {
					out["provider"] = lim.Provider
					if lim.KeyID != "" {
						out["key_id"] = lim.KeyID
					}
				} else {
					out["tool"], out["tenant"] = lim.Tool, tenant
				}
				return g.printJSON(out)
			}
			_, err = fmt.Fprintf(g.stdout, "%s%s: no rate limit\n", tenantPrefix(tenant), lim.Subject())
			return err
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant of the limit (default: the default tenant)")
	pf.add(cmd)
	return cmd
}
