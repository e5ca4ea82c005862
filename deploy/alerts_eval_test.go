package deploy

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/require"
)

// evalStep is how often the alert's expression is evaluated while its
// for: clause runs, as a rule group's interval would.
const evalStep = 30 * time.Second

// firing evaluates rule over series (one series a line, in PromQL's test
// notation: samples a minute apart from time 0, "0+1x30" counting up) the
// way Prometheus's rule manager decides it: the alerts firing at `at` are
// the label sets the expression returned at every evaluation from at-for
// to at, one evalStep apart.
func firing(t *testing.T, rule rulefmt.Rule, series string, at time.Duration) []map[string]string {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	var loaded []storage.Series
	for line := range strings.SplitSeq(series, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		lset, vals, err := p.ParseSeriesDesc(strings.TrimSpace(line))
		require.NoError(t, err, line)
		var samples []chunks.Sample
		for i, v := range vals {
			if !v.Omitted {
				samples = append(samples, sample{t: time.Duration(i) * time.Minute, f: v.Value})
			}
		}
		loaded = append(loaded, storage.NewListSeries(lset, samples))
	}
	st := &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var out []storage.Series
			for _, s := range loaded {
				if matchAll(s.Labels(), ms) {
					out = append(out, s)
				}
			}
			slices.SortFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
			return &seriesSet{series: out, i: -1}
		},
	}}
	ng := promql.NewEngine(promql.EngineOpts{
		MaxSamples: 1_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute, Parser: p,
	})
	t.Cleanup(func() { require.NoError(t, ng.Close()) })

	var held map[string]map[string]string // alive at every step so far, by label set
	for ts := at - time.Duration(rule.For); ts <= at; ts += evalStep {
		q, err := ng.NewInstantQuery(context.Background(), st, nil, rule.Expr, time.Unix(0, 0).Add(ts))
		require.NoError(t, err)
		res := q.Exec(context.Background())
		require.NoError(t, res.Err, rule.Alert)
		vec, err := res.Vector()
		require.NoError(t, err)
		now := map[string]map[string]string{}
		for _, s := range vec {
			now[s.Metric.String()] = s.Metric.Map()
		}
		q.Close()
		if held == nil {
			held = now
			continue
		}
		for k := range held {
			if _, ok := now[k]; !ok {
				delete(held, k)
			}
		}
	}
	return slices.SortedFunc(maps.Values(held), func(a, b map[string]string) int {
		return strings.Compare(labelsKey(a), labelsKey(b))
	})
}

func matchAll(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

// sample is a float sample at t after time 0.
type sample struct {
	t time.Duration
	f float64
}

func (s sample) T() int64                    { return s.t.Milliseconds() }
func (sample) ST() int64                     { return 0 }
func (s sample) F() float64                  { return s.f }
func (sample) H() *histogram.Histogram       { return nil }
func (sample) FH() *histogram.FloatHistogram { return nil }
func (sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sample) Copy() chunks.Sample         { return s }

// seriesSet serves a slice of series.
type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                      { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series              { return s.series[s.i] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }

func labelsKey(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + m[k] + ",")
	}
	return b.String()
}

// TestAlertsFire evaluates every alert of the rule file on made-up series
// with Prometheus's own query engine: each fires where it should, with the
// labels its annotations read, and stays quiet on the look-alikes it must
// not fire on (a blip, a small backlog, parked steps, one worker's half-open
// probe...).
func TestAlertsFire(t *testing.T) {
	t.Parallel()
	groups, errs := rulefmt.Parse(readFile(t, rulesFile), false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	rules := map[string]rulefmt.Rule{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = r
		}
	}

	minutes := func(n int) time.Duration { return time.Duration(n) * time.Minute }
	cases := []struct {
		name, alert, series string
		at                  time.Duration
		want                []map[string]string
	}{
		{
			name: "dead letters in the last 15 minutes", alert: "ToolqDeadLettersGrowing", at: minutes(25),
			series: `toolq_dead_letters_total{tool="exec", instance="w1"} 0x20 1x20
			         toolq_dead_letters_total{tool="code_execution", instance="w1"} 0x40`,
			want: []map[string]string{{"tool": "exec"}},
		},
		{
			name: "no dead letter for 15 minutes", alert: "ToolqDeadLettersGrowing", at: minutes(40),
			series: `toolq_dead_letters_total{tool="exec", instance="w1"} 0x20 1x20
			         toolq_dlq_messages{tool="exec", instance="w1"} 0x20 1x20
			         toolq_dlq_messages{tool="exec", instance="w2"} 0x20 1x20`,
		},
		{
			name: "the DLQ grows with no worker's counter (a tool nobody serves)", alert: "ToolqDeadLettersGrowing", at: minutes(25),
			series: `toolq_dlq_messages{tool="ghost", instance="w1"} 0x20 2x20
			         toolq_dlq_messages{tool="ghost", instance="w2"} 0x20 2x20
			         toolq_dlq_messages{tool="exec", instance="w1"} 3x40`,
			want: []map[string]string{{"tool": "ghost"}},
		},
		{
			name: "a purge shrinks the DLQ: no alert", alert: "ToolqDeadLettersGrowing", at: minutes(25),
			series: `toolq_dlq_messages{tool="exec", instance="w1"} 5x20 0x20`,
		},
		{
			name: "the queue sweep dead-letters a tenant's jobs", alert: "ToolqJobsExpiredUnserved", at: minutes(25),
			series: `toolq_queue_expired_total{tenant="ACME", instance="w1"} 0x20 3x20
			         toolq_queue_expired_total{tenant="", instance="w1"} 0x40`,
			want: []map[string]string{{"tenant": "ACME"}},
		},
		{
			name: "no job expired for 15 minutes", alert: "ToolqJobsExpiredUnserved", at: minutes(40),
			series: `toolq_queue_expired_total{tenant="ACME", instance="w1"} 0x20 3x20`,
		},
		{
			name: "a fifth of the jobs fail", alert: "ToolqJobFailureRatioHigh", at: minutes(25),
			series: `toolq_jobs_total{tool="exec", tenant="", outcome="completed"} 0+8x30
			         toolq_jobs_total{tool="exec", tenant="ACME", outcome="failed"} 0+1x30
			         toolq_jobs_total{tool="exec", tenant="ACME", outcome="dead_lettered"} 0+1x30
			         toolq_jobs_total{tool="code_mode.exec", tenant="", outcome="parked"} 0+100x30`,
			want: []map[string]string{{"tool": "exec"}},
		},
		{
			name: "parked steps do not dilute the failures", alert: "ToolqJobFailureRatioHigh", at: minutes(25),
			series: `toolq_jobs_total{tool="code_mode.exec", tenant="", outcome="completed"} 0+8x30
			         toolq_jobs_total{tool="code_mode.exec", tenant="", outcome="failed"} 0+2x30
			         toolq_jobs_total{tool="code_mode.exec", tenant="", outcome="parked"} 0+100x30`,
			want: []map[string]string{{"tool": "code_mode.exec"}},
		},
		{
			name: "a few failures among many", alert: "ToolqJobFailureRatioHigh", at: minutes(25),
			series: `toolq_jobs_total{tool="exec", tenant="", outcome="completed"} 0+20x30
			         toolq_jobs_total{tool="exec", tenant="", outcome="failed"} 0+1x30`,
		},
		{
			name: "half of very few jobs fail", alert: "ToolqJobFailureRatioHigh", at: minutes(25),
			series: `toolq_jobs_total{tool="exec", tenant="", outcome="completed"} 0+0.5x30
			         toolq_jobs_total{tool="exec", tenant="", outcome="failed"} 0+0.5x30`,
		},
		{
			name: "breaker open with half-open probes between", alert: "ToolqProviderBreakerOpen", at: minutes(9),
			series: `toolq_provider_breaker_state{provider="xai", model="grok-4", instance="w1"} 2 2 1 2 2 1 2 2 1 2
			         toolq_provider_breaker_state{provider="xai", model="grok-4", instance="w2"} 0 0 0 0 0 0 0 0 0 0
			         toolq_provider_breaker_state{provider="openai", model="gpt", instance="w1"} 0 0 0 0 0 0 0 0 0 0`,
			want: []map[string]string{{"provider": "xai", "model": "grok-4"}},
		},
		{
			name: "breaker closed once in the 5 minutes", alert: "ToolqProviderBreakerOpen", at: minutes(9),
			series: `toolq_provider_breaker_state{provider="xai", model="grok-4", instance="w1"} 2 2 2 2 2 2 0 2 2 2`,
		},
		{
			name: "backlog over 100 and growing, reported by two workers", alert: "ToolqConsumerLagRising", at: minutes(25),
			series: `toolq_consumer_pending{tool="exec", tenant="ACME", instance="w1"} 50+20x30
			         toolq_consumer_pending{tool="exec", tenant="ACME", instance="w2"} 50+20x30
			         toolq_consumer_pending{tool="exec", tenant="", instance="w1"} 500x30`,
			want: []map[string]string{{"tool": "exec", "tenant": "ACME"}},
		},
		{
			name: "small backlog growing", alert: "ToolqConsumerLagRising", at: minutes(25),
			series: `toolq_consumer_pending{tool="exec", tenant="", instance="w1"} 0+2x30`,
		},
		{
			name: "an approval waiting 15 minutes, seen by two workers", alert: "ToolqExecApprovalWaiting", at: minutes(15),
			series: `toolq_exec_approvals_oldest_pending_seconds{tenant="ACME", instance="w1"} 0+60x20
			         toolq_exec_approvals_oldest_pending_seconds{tenant="ACME", instance="w2"} 0+60x20
			         toolq_exec_approvals_oldest_pending_seconds{tenant="GLOBEX", instance="w1"} 0+20x20`,
			want: []map[string]string{{"tenant": "ACME"}},
		},
		{
			name: "approvals decided within minutes", alert: "ToolqExecApprovalWaiting", at: minutes(15),
			series: `toolq_exec_approvals_oldest_pending_seconds{tenant="", instance="w1"} 0 60 120 180 0 60 120 0 0 60 120 180 240 0 60 120`,
		},
		{
			name: "an approval expired", alert: "ToolqExecApprovalsExpired", at: minutes(15),
			series: `toolq_exec_approvals_decided_total{tenant="ACME", verdict="expired", instance="w1"} 0x10 1x10
			         toolq_exec_approvals_decided_total{tenant="GLOBEX", verdict="approved", instance="w1"} 0+1x20`,
			want: []map[string]string{{"tenant": "ACME"}},
		},
		{
			name: "firings failing for 15 minutes", alert: "ToolqScheduleFiringErrors", at: minutes(25),
			series: `toolq_schedule_firing_errors_total{instance="s1"} 0+1x30`,
			want:   []map[string]string{{}},
		},
		{
			name: "one failed firing", alert: "ToolqScheduleFiringErrors", at: minutes(25),
			series: `toolq_schedule_firing_errors_total{instance="s1"} 0x10 1x20`,
		},
		{
			name: "firings late by about two minutes", alert: "ToolqScheduleFiringsLate", at: minutes(35),
			series: `toolq_schedule_firing_lateness_seconds_bucket{le="16.384", instance="s1"} 0x40
			         toolq_schedule_firing_lateness_seconds_bucket{le="65.536", instance="s1"} 0x40
			         toolq_schedule_firing_lateness_seconds_bucket{le="262.144", instance="s1"} 0+1x40
			         toolq_schedule_firing_lateness_seconds_bucket{le="+Inf", instance="s1"} 0+1x40`,
			want: []map[string]string{{}},
		},
		{
			name: "firings on time", alert: "ToolqScheduleFiringsLate", at: minutes(35),
			series: `toolq_schedule_firing_lateness_seconds_bucket{le="1.024", instance="s1"} 0+1x40
			         toolq_schedule_firing_lateness_seconds_bucket{le="65.536", instance="s1"} 0+1x40
			         toolq_schedule_firing_lateness_seconds_bucket{le="+Inf", instance="s1"} 0+1x40`,
		},
	}
	fires := map[string]bool{}
	for _, tc := range cases {
		if len(tc.want) > 0 {
			fires[tc.alert] = true
		}
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(rules)), slices.Collect(maps.Keys(fires)), "every alert has a case that makes it fire")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, ok := rules[tc.alert]
			require.True(t, ok, tc.alert)
			got := firing(t, r, tc.series, tc.at)
			if len(tc.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, got)
		})
	}
}
