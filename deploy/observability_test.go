package deploy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"

	"github.com/toolq/toolq/metrics"
	"github.com/toolq/toolq/worker"
)

const (
	rulesFile     = "prometheus/toolq-alerts.yaml"
	dashboardFile = "grafana/toolq-dashboard.json"
)

// family is one metric family the metrics package registers, as gathered.
type family struct {
	typ    dto.MetricType
	labels map[string]bool
	// values are the label values seen, for the labels whose values are a
	// closed set (closedLabels).
	values map[string]map[string]bool
}

// closedLabels are the labels whose values the metrics package fixes: a
// matcher on them must name values it really writes, so a typo such as
// outcome="dead_letered" (which would match nothing, silently) fails.
var closedLabels = map[string]bool{"outcome": true, "verdict": true, "from": true}

// describing is a Registerer that records the name of every descriptor
// registered through it.
type describing struct {
	prometheus.Registerer
	names []string
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for desc := range ch {
		m := fqName.FindStringSubmatch(desc.String())
		if m == nil {
			return fmt.Errorf("no fqName in %s", desc)
		}
		d.names = append(d.names, m[1])
	}
	return d.Registerer.Register(c)
}

// registeredFamilies builds the metrics package's collectors on a registry
// of their own, makes a series of every family through the observers the
// runtime calls, and gathers them: the names, types, label names and
// closed label values the dashboard and the rules may use. Every
// descriptor registered must come out of the gathering, so a new metric
// the drive below does not reach fails here, not by going unchecked.
func registeredFamilies(t *testing.T) map[string]*family {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := &describing{Registerer: reg}
	m, err := metrics.New(rec, nil)
	require.NoError(t, err)

	obs := m.Worker()
	tool := obs.Tool("code_execution", "ACME")
	tool.Started(1, time.Millisecond)
	tool.Ended(worker.OutcomeCompleted, time.Millisecond)
	tool.DeadLettered()
	obs.Lag([]worker.ConsumerLag{{Tool: "code_execution", Tenant: "ACME", Pending: 3, AckPending: 1}})
	dlq, ok := obs.(worker.DLQObserver)
	require.True(t, ok, "the worker's observer reads the DLQ's size")
	dlq.DLQ(worker.DLQSize{Messages: map[string]uint64{"code_execution": 2}, Bytes: 4096})
	expiry, ok := obs.(worker.QueueExpiryObserver)
	require.True(t, ok, "the worker's observer counts the queue sweep's dead letters")
	expiry.QueueExpired("ACME")
	cm := m.CodeMode()
	cm.Suspended(4096)
	cm.Resumed(false)
	cm.Resumed(true)
	cm.RunsStored(map[string]int{"ACME": 2})
	cm.VMPool(1, 1)
	cm.Restored(time.Millisecond)
	ex := m.Exec()
	ex.ApprovalRequested("ACME")
	for _, v := range []string{"approved", "denied", "expired"} {
		ex.ApprovalDecided("ACME", v)
	}
	ex.ApprovalsPending(map[string]int{"ACME": 1}, map[string]time.Duration{"ACME": time.Minute})
	m.BreakerChanged("xai", "grok-4", "open")
	s := m.Scheduler()
	s.Fired(time.Second)
	s.CaughtUp()
	s.FireFailed()

	gathered, err := reg.Gather()
	require.NoError(t, err)
	fams := map[string]*family{}
	for _, mf := range gathered {
		f := &family{typ: mf.GetType(), labels: map[string]bool{}, values: map[string]map[string]bool{}}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				f.labels[lp.GetName()] = true
				if closedLabels[lp.GetName()] {
					if f.values[lp.GetName()] == nil {
						f.values[lp.GetName()] = map[string]bool{}
					}
					f.values[lp.GetName()][lp.GetValue()] = true
				}
			}
		}
		fams[mf.GetName()] = f
	}
	require.NotEmpty(t, rec.names)
	for _, name := range rec.names {
		require.Contains(t, fams, name, "%s is registered but registeredFamilies makes no series of it: drive it there", name)
	}
	return fams
}

// checker checks PromQL expressions against the registered families.
type checker struct {
	fams   map[string]*family
	parser parser.Parser
}

func newChecker(t *testing.T) *checker {
	t.Helper()
	return &checker{fams: registeredFamilies(t), parser: parser.NewParser(parser.Options{})}
}

// resolve maps a series name onto its family: a counter's or gauge's own
// name, or a histogram's with _bucket (which adds le), _sum or _count.
func (c *checker) resolve(name string) (*family, map[string]bool, error) {
	if f, ok := c.fams[name]; ok {
		if f.typ == dto.MetricType_HISTOGRAM {
			return nil, nil, fmt.Errorf("%s is a histogram: select %[1]s_bucket, _sum or _count", name)
		}
		return f, f.labels, nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if f, ok := c.fams[base]; ok && f.typ == dto.MetricType_HISTOGRAM {
			labels := f.labels
			if suffix == "_bucket" {
				labels = map[string]bool{"le": true}
				for l := range f.labels {
					labels[l] = true
				}
			}
			return f, labels, nil
		}
	}
	return nil, nil, fmt.Errorf("%s is not a series the metrics package registers", name)
}

// selectorName is the metric name a vector selector selects.
func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			return m.Value
		}
	}
	return ""
}

var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

// check parses expr and checks it: every selector names a registered series
// (histograms by their suffixes), every matcher a label that series has
// (and a value it writes, for closed labels), every aggregation's by()
// labels that all its selectors have. It returns the families referenced
// and the by() labels of the aggregations.
func (c *checker) check(expr string) (refs, grouping []string, err error) {
	node, err := c.parser.ParseExpr(expr)
	if err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	var errs []error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			name := selectorName(n)
			if name == "" {
				errs = append(errs, fmt.Errorf("selector %s names no metric", n))
				return nil
			}
			f, labels, rerr := c.resolve(name)
			if rerr != nil {
				errs = append(errs, rerr)
				return nil
			}
			for base, ff := range c.fams {
				if ff == f {
					refs = append(refs, base)
				}
			}
			for _, m := range n.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					continue
				}
				if !labels[m.Name] {
					errs = append(errs, fmt.Errorf("%s has no label %q", name, m.Name))
					continue
				}
				if !closedLabels[m.Name] {
					continue
				}
				if !literalAlternation.MatchString(m.Value) {
					errs = append(errs, fmt.Errorf("%s{%s}: match the closed label %s with literal values a|b", name, m, m.Name))
					continue
				}
				for v := range strings.SplitSeq(m.Value, "|") {
					if !f.values[m.Name][v] {
						errs = append(errs, fmt.Errorf("%s{%s}: %s=%q is not a value the metrics package writes", name, m, m.Name, v))
					}
				}
			}
		case *parser.AggregateExpr:
			if n.Without {
				errs = append(errs, fmt.Errorf("%s: use by(), not without()", n))
				return nil
			}
			grouping = append(grouping, n.Grouping...)
			parser.Inspect(n.Expr, func(inner parser.Node, _ []parser.Node) error {
				vs, ok := inner.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				_, labels, rerr := c.resolve(selectorName(vs))
				if rerr != nil {
					return nil // reported above
				}
				for _, l := range n.Grouping {
					if !labels[l] {
						errs = append(errs, fmt.Errorf("%s by (%s): %s has no label %q", n.Op, strings.Join(n.Grouping, ", "), selectorName(vs), l))
					}
				}
				return nil
			})
		}
		return nil
	})
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("%s: %v", expr, errs)
	}
	slices.Sort(refs)
	return slices.Compact(refs), grouping, nil
}

func TestCheckerRejects(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	for expr, want := range map[string]string{
		`rate(toolq_job_total[5m])`:                                    "toolq_job_total is not a series",
		`toolq_job_duration_seconds`:                                   "is a histogram",
		`rate(toolq_jobs_in_flight_bucket[5m])`:                        "toolq_jobs_in_flight_bucket is not a series",
		`toolq_jobs_in_flight{tenant="ACME"}`:                          `has no label "tenant"`,
		`sum by (tenant) (rate(toolq_job_duration_seconds_count[5m]))`: `toolq_job_duration_seconds_count has no label "tenant"`,
		`sum by (le) (rate(toolq_job_duration_seconds_sum[5m]))`:       `has no label "le"`,
		`toolq_jobs_total{outcome="dead_letered"}`:                     `outcome="dead_letered" is not a value`,
		`toolq_jobs_total{outcome=~"failed|succeeded"}`:                `outcome="succeeded" is not a value`,
		`toolq_jobs_total{outcome=~"fail.*"}`:                          "with literal values",
		`toolq_exec_approvals_decided_total{verdict="timeout"}`:        `verdict="timeout"`,
		`sum without (tool) (toolq_jobs_total)`:                        "not without()",
		`sum by (tool) (rate(toolq_jobs_total[5m])`:                    "parse",
		`{tool="x"}`: "names no metric",
		`histogram_quantile(0.9, sum by (le) (rate(toolq_schedule_firings_total[5m])))`: `toolq_schedule_firings_total has no label "le"`,
	} {
		_, _, err := c.check(expr)
		require.ErrorContains(t, err, want, expr)
	}
	refs, grouping, err := c.check(`histogram_quantile(0.99, sum by (le, tool) (rate(toolq_job_duration_seconds_bucket{tool=~"a|b"}[5m]))) and on (tool) toolq_jobs_total{outcome="failed"}`)
	require.NoError(t, err)
	require.Equal(t, []string{"toolq_job_duration_seconds", "toolq_jobs_total"}, refs)
	require.Equal(t, []string{"le", "tool"}, grouping)
}

var annotationLabel = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)

// TestAlertRules parses the rule file with Prometheus's own rule parser
// (which also parses every expression and annotation template) and checks
// each rule: an alert with a severity, a summary and a description, an
// expression over registered series only, and annotations that name only
// labels the expression keeps.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	groups, errs := rulefmt.Parse(readFile(t, rulesFile), false, model.LegacyValidation, c.parser, slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	require.Len(t, groups.Groups, 1)

	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "only alerting rules: %s", r.Expr)
			require.True(t, strings.HasPrefix(r.Alert, "Toolq"), r.Alert)
			require.NotContains(t, names, r.Alert, "alert names are unique")
			names = append(names, r.Alert)
			require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, strings.TrimSpace(r.Annotations["summary"]), r.Alert)
			require.NotEmpty(t, strings.TrimSpace(r.Annotations["description"]), r.Alert)
			refs, grouping, err := c.check(r.Expr)
			require.NoError(t, err, r.Alert)
			require.NotEmpty(t, refs, r.Alert)
			for _, a := range r.Annotations {
				for _, m := range annotationLabel.FindAllStringSubmatch(a, -1) {
					require.Contains(t, grouping, m[1], "%s: annotation names $labels.%s, which the expression does not keep", r.Alert, m[1])
				}
			}
		}
	}
	require.ElementsMatch(t, []string{
		"ToolqDeadLettersGrowing", "ToolqJobsExpiredUnserved", "ToolqJobFailureRatioHigh", "ToolqProviderBreakerOpen",
		"ToolqConsumerLagRising", "ToolqExecApprovalWaiting", "ToolqExecApprovalsExpired", "ToolqScheduleFiringErrors",
		"ToolqScheduleFiringsLate",
	}, names)
}

// TestAlertRulesRejected breaks a copy of the rule file and requires the
// parser or the checker to refuse it.
func TestAlertRulesRejected(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	orig := string(readFile(t, rulesFile))
	for name, tc := range map[string]struct{ old, new, err string }{
		"renamed metric":   {"toolq_dead_letters_total[15m]", "toolq_dead_letter_total[15m]", "not a series"},
		"bad PromQL":       {"[15m])) > 0", "[15m]) > 0", "parse error"},
		"unknown field":    {"        for: 5m\n", "        for: 5m\n        fore: 5m\n", "field fore not found"},
		"bad template":     {"{{ $labels.tool }} are being", "{{ $labels.tool } are being", "template"},
		"lost label":       {"max by (tenant) (toolq_exec_approvals_oldest_pending_seconds)", "max(toolq_exec_approvals_oldest_pending_seconds)", "annotation names $labels.tenant"},
		"label not there":  {"max by (provider, model) (toolq_provider_breaker_state)", "max by (provider, tool) (toolq_provider_breaker_state)", `no label "tool"`},
		"verdict misspelt": {`decided_total{verdict="expired"}`, `decided_total{verdict="expire"}`, "not a value"},
	} {
		require.Contains(t, orig, tc.old, name)
		broken := strings.Replace(orig, tc.old, tc.new, 1)
		groups, errs := rulefmt.Parse([]byte(broken), false, model.LegacyValidation, c.parser, slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			require.ErrorContains(t, errs[0], tc.err, name)
			continue
		}
		var failed []string
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				_, grouping, err := c.check(r.Expr)
				if err != nil {
					failed = append(failed, err.Error())
					continue
				}
				for _, a := range r.Annotations {
					for _, m := range annotationLabel.FindAllStringSubmatch(a, -1) {
						if !slices.Contains(grouping, m[1]) {
							failed = append(failed, "annotation names $labels."+m[1])
						}
					}
				}
			}
		}
		require.NotEmpty(t, failed, name)
		require.Contains(t, strings.Join(failed, "\n"), tc.err, name)
	}
}

// dashboard is the part of Grafana's dashboard JSON model the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasourceRef  `json:"datasource"`
			IncludeAll bool            `json:"includeAll"`
			AllValue   string          `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasourceRef           `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Panels     []panel                  `json:"panels"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
}

// grafanaVars are the values a query's variables take for parsing: the
// dashboard's own (as Grafana interpolates a multi-value regex) and
// Grafana's built-in intervals.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "2m", "$__interval", "30s", "$__range", "6h",
	"${tool}", "code_execution|exec", "$tool", "code_execution|exec",
	"${tenant}", ".*", "$tenant", ".*",
)

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	var d dashboard
	require.NoError(t, json.Unmarshal(readFile(t, dashboardFile), &d))
	return &d
}

// flatPanels lists the panels, those inside collapsed rows too.
func flatPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatPanels(p.Panels)...)
	}
	return out
}

// TestDashboard checks the dashboard: its variables, that every panel
// queries the chosen data source, that every query parses as PromQL once
// the variables are substituted and selects only registered series with
// their own labels, that panels do not overlap, and that every metric the
// metrics package registers is on it.
func TestDashboard(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	d := loadDashboard(t)
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Title)
	require.GreaterOrEqual(t, d.SchemaVersion, 39)

	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Type {
		case "datasource":
			require.Equal(t, "datasource", v.Name)
			require.JSONEq(t, `"prometheus"`, string(v.Query))
		case "query":
			require.Equal(t, "${datasource}", v.Datasource.UID, v.Name)
			m := labelValues.FindStringSubmatch(v.Definition)
			require.NotNil(t, m, "%s: %q is not label_values(selector, label)", v.Name, v.Definition)
			var q struct{ Query string }
			require.NoError(t, json.Unmarshal(v.Query, &q))
			require.Equal(t, v.Definition, q.Query, v.Name)
			_, _, err := c.check(grafanaVars.Replace(m[1]))
			require.NoError(t, err, v.Name)
			node, err := c.parser.ParseExpr(grafanaVars.Replace(m[1]))
			require.NoError(t, err)
			vs, ok := node.(*parser.VectorSelector)
			require.True(t, ok, "%s: label_values of a selector", v.Name)
			f, _, err := c.resolve(selectorName(vs))
			require.NoError(t, err)
			require.True(t, f.labels[m[2]], "%s: %s has no label %s", v.Name, selectorName(vs), m[2])
			require.True(t, v.IncludeAll, v.Name)
			require.Equal(t, ".*", v.AllValue, "%s: All must match the default tenant's empty label too", v.Name)
		default:
			t.Fatalf("variable %s of type %s", v.Name, v.Type)
		}
	}
	require.True(t, vars["datasource"] && vars["tool"] && vars["tenant"], "variables datasource, tool, tenant")

	ids := map[int]bool{}
	used := map[string]bool{}
	var boxes []panel
	exprs := 0
	for _, p := range flatPanels(d.Panels) {
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		require.NotEmpty(t, p.Title, "panel %d", p.ID)
		require.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, p.Title)
		require.Positive(t, p.GridPos.W, p.Title)
		require.Positive(t, p.GridPos.H, p.Title)
		boxes = append(boxes, p)
		if p.Type == "row" {
			require.Empty(t, p.Targets, p.Title)
			continue
		}
		require.Contains(t, []string{"timeseries", "stat", "state-timeline"}, p.Type, p.Title)
		require.NotNil(t, p.Datasource, p.Title)
		require.Equal(t, "${datasource}", p.Datasource.UID, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		refIDs := map[string]bool{}
		for _, tg := range p.Targets {
			require.False(t, refIDs[tg.RefID], "%s: refId %s twice", p.Title, tg.RefID)
			refIDs[tg.RefID] = true
			require.NotNil(t, tg.Datasource, p.Title)
			require.Equal(t, "${datasource}", tg.Datasource.UID, p.Title)
			expr := grafanaVars.Replace(tg.Expr)
			require.NotContains(t, expr, "$", "%s: a variable the dashboard does not define: %s", p.Title, tg.Expr)
			refs, _, err := c.check(expr)
			require.NoError(t, err, p.Title)
			for _, r := range refs {
				used[r] = true
			}
			exprs++
		}
	}
	for i, a := range boxes {
		for _, b := range boxes[i+1:] {
			overlap := a.GridPos.X < b.GridPos.X+b.GridPos.W && b.GridPos.X < a.GridPos.X+a.GridPos.W &&
				a.GridPos.Y < b.GridPos.Y+b.GridPos.H && b.GridPos.Y < a.GridPos.Y+a.GridPos.H
			require.False(t, overlap, "panels %q and %q overlap", a.Title, b.Title)
		}
	}
	require.Greater(t, exprs, 20)
	for name := range c.fams {
		require.True(t, used[name], "%s is registered but no panel shows it", name)
	}
}

// TestDashboardRejected breaks a copy of the dashboard and requires the
// checks to refuse it.
func TestDashboardRejected(t *testing.T) {
	t.Parallel()
	c := newChecker(t)
	d := loadDashboard(t)
	var failed int
	var target string
	for _, p := range flatPanels(d.Panels) {
		for _, tg := range p.Targets {
			if strings.Contains(tg.Expr, "toolq_job_queue_wait_seconds_bucket") {
				target = tg.Expr
			}
		}
	}
	require.NotEmpty(t, target)
	for _, broken := range []string{
		strings.ReplaceAll(target, "toolq_job_queue_wait_seconds_bucket", "toolq_job_queue_wait_bucket"),
		strings.ReplaceAll(target, "sum by (le", "sum by (tenant, le"),
		strings.ReplaceAll(target, "$__rate_interval", "$__rate_intervl"),
	} {
		_, _, err := c.check(grafanaVars.Replace(broken))
		if err == nil && !strings.Contains(grafanaVars.Replace(broken), "$") {
			continue
		}
		failed++
	}
	require.Equal(t, 3, failed)
}

// TestChartObservability renders the chart's PrometheusRule and dashboard
// ConfigMap: off by default, and when on they carry exactly the files under
// deploy/prometheus and deploy/grafana (the chart's copies must be identical,
// so the two cannot drift), decoded strictly.
func TestChartObservability(t *testing.T) {
	t.Parallel()
	require.Equal(t, string(readFile(t, rulesFile)), string(readFile(t, chartDir+"/files/toolq-alerts.yaml")),
		"files/toolq-alerts.yaml is a copy of deploy/prometheus/toolq-alerts.yaml")
	require.Equal(t, string(readFile(t, dashboardFile)), string(readFile(t, chartDir+"/files/toolq-dashboard.json")),
		"files/toolq-dashboard.json is a copy of deploy/grafana/toolq-dashboard.json")

	dashboardCM := releaseName + "-toolq-dashboard"
	m := render(t)
	require.Empty(t, m.all("PrometheusRule"), "off by default")
	_, ok := m.find("ConfigMap", dashboardCM)
	require.False(t, ok, "off by default")

	on := map[string]any{"metrics": map[string]any{
		"prometheusRule":   map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
		"grafanaDashboard": map[string]any{"enabled": true, "annotations": map[string]any{"grafana_folder": "toolq"}},
	}}
	m = render(t, on)
	checkRelease(t, m)

	rules := typed[*monitoringv1.PrometheusRule](t, m.all("PrometheusRule"))
	require.Len(t, rules, 1)
	pr := rules[0]
	require.Equal(t, releaseName+"-toolq", pr.Name)
	require.Equal(t, "kube-prometheus-stack", pr.Labels["release"])
	want, errs := rulefmt.Parse(readFile(t, rulesFile), false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	require.Len(t, pr.Spec.Groups, len(want.Groups))
	for i, g := range want.Groups {
		got := pr.Spec.Groups[i]
		require.Equal(t, g.Name, got.Name)
		require.Len(t, got.Rules, len(g.Rules))
		for j, r := range g.Rules {
			gr := got.Rules[j]
			require.Equal(t, r.Alert, gr.Alert)
			require.Equal(t, r.Expr, gr.Expr.String(), r.Alert)
			if r.For != 0 {
				require.NotNil(t, gr.For, r.Alert)
				d, err := model.ParseDuration(string(*gr.For))
				require.NoError(t, err)
				require.Equal(t, r.For, d, r.Alert)
			} else {
				require.Nil(t, gr.For, r.Alert)
			}
			require.Equal(t, r.Labels, gr.Labels, r.Alert)
			require.Equal(t, r.Annotations, gr.Annotations, r.Alert)
		}
	}

	o, ok := m.find("ConfigMap", dashboardCM)
	require.True(t, ok, "dashboard ConfigMap in %v", m.names("ConfigMap"))
	cm, ok := o.obj.(*corev1.ConfigMap)
	require.True(t, ok)
	require.Equal(t, "1", cm.Labels["grafana_dashboard"], "the label Grafana's sidecar looks for")
	require.Equal(t, "toolq", cm.Annotations["grafana_folder"])
	require.Equal(t, string(readFile(t, dashboardFile)), cm.Data["toolq-dashboard.json"])

	// No metrics port: nothing to alert on or to draw.
	m = render(t, on, map[string]any{"health": map[string]any{"enabled": false}})
	require.Empty(t, m.all("PrometheusRule"))
	_, ok = m.find("ConfigMap", dashboardCM)
	require.False(t, ok)
}
