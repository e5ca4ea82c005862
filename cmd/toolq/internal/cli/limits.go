package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// The operator's rate limits: `toolq limits set|ls|rm` read and write the
// limits bucket, which every worker follows (RATIONALE "Rate limits").

func newLimitsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Rate limits of tools, per tenant, enforced across all workers (ls, set, rm)",
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

func newLimitsSetCmd(g *globals) *cobra.Command {
	var (
		tenant string
		burst  int
	)
	cmd := &cobra.Command{
		Use:   "set TOOL RATE",
		Short: "Limit how often jobs of TOOL start (e.g. 60/min), for the default tenant or --tenant",
		Long: `set writes TOOL's rate limit: RATE is <count>/<s|min|h|duration> (60/min,
10/s, 5/30s), --burst how many may start at once after a quiet spell.
Every worker applies it within moments to the jobs it has not started yet;
jobs over the limit wait (they are not failed and spend no attempt).`,
		Example: `  toolq limits set code_execution 60/min --burst 10
  toolq limits set code_mode.exec 5/s --tenant ACME`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			rate, per, err := contracts.ParseRate(args[1])
			if err != nil {
				return err
			}
			lim := contracts.RateLimit{Tool: args[0], Tenant: tenant, Rate: rate, Per: per, Burst: burst}
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
			if _, err := kv.Put(ctx, contracts.RateLimitKey(tenant, lim.Tool), data); err != nil {
				return fmt.Errorf("limits set: %w", err)
			}
			if g.jsonOut {
				return g.printJSON(lim)
			}
			_, err = fmt.Fprintf(g.stdout, "%s%s: %s\n", tenantPrefix(tenant), lim.Tool, lim.String())
			return err
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant whose jobs of TOOL it limits (default: the default tenant)")
	cmd.Flags().IntVar(&burst, "burst", 1, "how many jobs may start at once after a quiet spell")
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
				return lims[i].Tool < lims[j].Tool
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
				fmt.Fprintf(tw, "%s\t%s\t%s\n", operator.OrDash(l.Tenant), l.Tool, l.String())
			}
			return tw.Flush()
		},
	}
}

func newLimitsRmCmd(g *globals) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "rm TOOL",
		Short: "Remove TOOL's rate limit (of the default tenant or --tenant)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := contracts.ValidateTool(args[0]); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			kv, done, err := g.limitsBucket(ctx, "limits rm")
			if err != nil {
				return err
			}
			defer done()
			key := contracts.RateLimitKey(tenant, args[0])
			if _, err := kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
				return contracts.Errorf(contracts.CodeInvalidInput, "no rate limit for %s%s (toolq limits ls)", tenantPrefix(tenant), args[0])
			}
			if err := kv.Delete(ctx, key); err != nil {
				return fmt.Errorf("limits rm: %w", err)
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"tool": args[0], "tenant": tenant, "removed": true})
			}
			_, err = fmt.Fprintf(g.stdout, "%s%s: no rate limit\n", tenantPrefix(tenant), args[0])
			return err
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant of the limit (default: the default tenant)")
	return cmd
}
