package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolq/toolq/cmd/toolq/internal/bench"
	"github.com/toolq/toolq/contracts"
)

func newBenchCmd(g *globals) *cobra.Command {
	cfg := bench.Defaults()
	var (
		anchors       string
		tenants, mx   bool
		rounds        int
		observe       bool
		observeRounds int
		observeRatio  float64
		workers       []int
		// workerProfiles is --worker-cpuprofiles: a directory.
		workerProfiles string
		serverPID      int
		scenario       string
		clusterBin     string
		clusterNodes   int
		clusterWork    int
		failoverFor    time.Duration
		failoverMode   string
		flow           = bench.FlowDefaults()
		soak           time.Duration
		cpuProfile     string
		batchProfile   string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure end-to-end throughput and latency on an embedded server",
		Long: `bench starts an embedded nats-server and a worker in this process and measures
noop jobs end to end (submit -> worker -> completion event received by the
requester): throughput with many submitters, and p50/p99 latency at low rate.
It prints one "bench.<name> <value> <unit>" line per figure on stdout, and
its phases on stderr as they begin. With --anchors
FILE (a summary of baseline figures measured beside it, "anchor.<name> <value> <unit>"
lines) it also prints toolq's figures as ratios of the anchors.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rounds < 1 || rounds > 20 {
				return contracts.Errorf(contracts.CodeInvalidInput, "--metrics-rounds %d out of range [1, 20]", rounds)
			}
			if observeRatio <= 0 || observeRatio > 1 {
				return contracts.Errorf(contracts.CodeInvalidInput, "--observe-sample-ratio %v out of range (0, 1]", observeRatio)
			}
			if observeRounds < 3 || observeRounds > 20 {
				return contracts.Errorf(contracts.CodeInvalidInput, "--observe-rounds %d out of range [3, 20]", observeRounds)
			}
			// The phases on stderr as they begin; stdout keeps the figures.
			cfg.Phase = func(phase string) { g.tell("bench: %s", phase) }
			if cpuProfile != "" && (clusterBin != "" || len(workers) > 0 || soak > 0 || scenario != "") {
				// Not the in-process phases: the whole of this process.
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer func() { _ = stop() }()
			}
			if clusterBin != "" {
				figs, err := bench.RunCluster(cmd.Context(), bench.ClusterConfig{
					Config: cfg, ServerBin: clusterBin, Nodes: clusterNodes, Workers: clusterWork, FailoverFor: failoverFor, Failover: failoverMode,
					Start: workerProcesses(g, workerProfiles),
				})
				if err != nil {
					return err
				}
				return printFigures(g, figs)
			}
			if len(workers) > 0 && scenario != "" {
				flow.Phase = cfg.Phase
				return scenarioProcesses(cmd, g, scenario, flow, workers, workerProfiles)
			}
			if len(workers) > 0 {
				return scaleOut(cmd, g, cfg, workers, workerProfiles, serverPID)
			}
			if soak > 0 {
				figs, err := bench.Soak(cmd.Context(), cfg, soak)
				if err != nil {
					return err
				}
				return printFigures(g, figs)
			}
			if scenario != "" {
				flow.Phase = cfg.Phase
				figs, err := bench.RunScenario(cmd.Context(), scenario, flow)
				if err != nil {
					return err
				}
				return printFigures(g, figs)
			}
			for _, p := range []struct {
				path string
				to   *io.Writer
			}{{cpuProfile, &cfg.CPUProfile}, {batchProfile, &cfg.BatchCPUProfile}} {
				if p.path == "" {
					continue
				}
				fh, err := os.Create(p.path)
				if err != nil {
					return contracts.Errorf(contracts.CodeInvalidInput, "cpu profile: %v", err)
				}
				defer fh.Close()
				*p.to = fh
			}
			figs, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			vals := map[string]float64{}
			var all []bench.Figure
			emit := func(f bench.Figure) {
				vals[f.Name] = f.Value
				all = append(all, f)
				if !g.jsonOut {
					fmt.Fprintln(g.stdout, f)
				}
			}
			for _, f := range figs {
				emit(f)
			}
			if tenants {
				// The same run again, the jobs crossing a tenant account's imports.
				on := cfg
				on.Tenants = true
				g.tell("bench: again, through a tenant account's imports")
				tfigs, err := bench.Run(cmd.Context(), on)
				if err != nil {
					return err
				}
				for _, f := range tfigs {
					f.Name = "tenants_" + f.Name
					emit(f)
				}
				if off := vals["e2e_throughput"]; off > 0 {
					emit(bench.Figure{Name: "tenants_throughput_vs_single", Value: vals["tenants_e2e_throughput"] / off, Unit: "ratio"})
				}
			}
			if mx {
				// Metrics on and off in turns, in the same process, rounds
				// times (the run above was the first off): a machine whose
				// load drifts moves both alike. The ratio is the median of
				// the rounds' on/off ratios.
				on := cfg
				on.Metrics = true
				offs, ons, ratios, err := alternate(cmd, g, cfg, on, "metrics", rounds, vals["e2e_throughput"])
				if err != nil {
					return err
				}
				emit(bench.Figure{Name: "metrics_off_throughput_median", Value: median(offs), Unit: "jobs/s"})
				emit(bench.Figure{Name: "metrics_on_throughput_median", Value: median(ons), Unit: "jobs/s"})
				emit(bench.Figure{Name: "metrics_throughput_vs_off", Value: median(ratios), Unit: "ratio"})
			}
			if observe {
				// Observability off, and metrics and tracing (every trace,
				// exported over OTLP/HTTP) on, in turns as with --metrics.
				// The rounds after the first run measure throughput alone,
				// so more of them fit in the same time.
				off := cfg
				off.ThroughputOnly = true
				on := off
				on.Metrics, on.Tracing, on.TraceSampleRatio = true, true, observeRatio
				offs, ons, ratios, cpus, err := alternateCPU(cmd, g, off, on, observeRounds, vals["e2e_throughput"], vals["cpu_per_job"])
				if err != nil {
					return err
				}
				for i := range offs {
					emit(bench.Figure{Name: fmt.Sprintf("observability_off_throughput_round_%d", i+1), Value: offs[i], Unit: "jobs/s"})
					emit(bench.Figure{Name: fmt.Sprintf("observability_on_throughput_round_%d", i+1), Value: ons[i], Unit: "jobs/s"})
				}
				// CPU a job, off and on: less moved by the machine's other
				// load than throughput, so it resolves a smaller cost.
				emit(bench.Figure{Name: "observability_cpu_per_job_off_median", Value: median(cpus[0]), Unit: "us"})
				emit(bench.Figure{Name: "observability_cpu_per_job_on_median", Value: median(cpus[1]), Unit: "us"})
				emit(bench.Figure{Name: "observability_cpu_overhead_pct", Value: median(cpus[2]), Unit: "%"})
				emit(bench.Figure{Name: "observability_off_throughput_median", Value: median(offs), Unit: "jobs/s"})
				emit(bench.Figure{Name: "observability_on_throughput_median", Value: median(ons), Unit: "jobs/s"})
				emit(bench.Figure{Name: "observability_throughput_vs_off", Value: median(ratios), Unit: "ratio"})
				emit(bench.Figure{Name: "observability_overhead_pct", Value: max(0, (1-median(ratios))*100), Unit: "%"})
			}
			if anchors != "" {
				a, err := readAnchors(anchors)
				if err != nil {
					return err
				}
				ratio := func(name string, num, den float64) {
					if den > 0 {
						emit(bench.Figure{Name: name, Value: num / den, Unit: "ratio"})
					}
				}
				ratio("throughput_vs_nats_js_pub_async", vals["e2e_throughput"], a["nats_js_pub_async"])
				ratio("throughput_vs_asynq_process_c50", vals["e2e_throughput"], a["asynq_process_c50"])
				ratio("batch_submit_vs_nats_js_pub_async", vals["batch_submit_rate"], a["nats_js_pub_async"])
				ratio("latency_p50_vs_asynq_p50", vals["e2e_latency_p50"], a["asynq_e2e_latency_p50"])
				ratio("latency_p50_vs_nats_reqreply_p50", vals["e2e_latency_p50"]*1000, a["nats_reqreply_p50"])
			}
			if g.jsonOut {
				out := make([]map[string]any, 0, len(all))
				for _, f := range all {
					out = append(out, map[string]any{"name": "bench." + f.Name, "value": f.Value, "unit": f.Unit})
				}
				return g.printJSON(map[string]any{"figures": out})
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Jobs, "jobs", cfg.Jobs, "jobs of the throughput run")
	f.IntVar(&cfg.Submitters, "submitters", cfg.Submitters, "submitting goroutines")
	f.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "worker concurrency")
	f.IntVar(&cfg.LatencyJobs, "latency-jobs", cfg.LatencyJobs, "jobs of the latency run (0 skips it)")
	f.DurationVar(&cfg.LatencyInterval, "latency-interval", cfg.LatencyInterval, "pause between latency jobs")
	f.IntVar(&cfg.PayloadBytes, "payload", cfg.PayloadBytes, "bytes of padding in each job's input")
	f.IntVar(&cfg.BatchWindow, "batch-window", 0, "SubmitBatch's publish window in the batch-submit phase (0: its default)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile (pprof) of the in-process throughput phase to this file; with --workers, --cluster-server, --soak or --scenario, of this whole process (the requester)")
	f.StringVar(&batchProfile, "cpuprofile-batch", "", "write a CPU profile (pprof) of the in-process batch-submit phase to this file")
	f.StringVar(&anchors, "anchors", "", "anchors summary file to compute ratios against")
	f.BoolVar(&tenants, "tenants", false, "run again with the jobs submitted and followed through a tenant account's imports and print both, with their throughput ratio")
	f.BoolVar(&mx, "metrics", false, "run again with the worker's Prometheus metrics on, in turns with off, and print both medians and the median on/off throughput ratio")
	f.IntVar(&rounds, "metrics-rounds", 3, "rounds of off and on with --metrics")
	f.StringVar(&scenario, "scenario", "", "run one flow-control scenario instead: fairness (a quiet tenant's start delay behind a noisy tenant's backlog, and the same with fairness off), sessions (the same between two sessions of one tenant, with session lanes apart and folded), priority (a high job's start delay behind a backlog of normal ones, and a normal one's), concurrency (jobs of one key with limit 4 on 8 workers, one killed: the most seen at once and the leases left) or ratelimit (a limit of 50/s on 3 workers: the rate kept and its error)")
	f.IntVar(&flow.Backlog, "scenario-backlog", flow.Backlog, "jobs queued ahead in a --scenario")
	f.IntVar(&flow.Probes, "scenario-probes", flow.Probes, "the quiet tenant's timed jobs in --scenario fairness")
	f.IntVar(&flow.Concurrency, "scenario-concurrency", flow.Concurrency, "the worker's slots in a --scenario")
	f.DurationVar(&soak, "soak", 0, "instead, run throughput rounds of --jobs back to back for this long (e.g. 10m) and print the slopes of heap and goroutines per minute and the redeliveries")
	f.DurationVar(&flow.Duration, "scenario-duration", flow.Duration, "how long --scenario ratelimit measures")
	f.IntVar(&flow.Burst, "scenario-burst", 1, "the burst of --scenario ratelimit's limit of 50/s")
	f.BoolVar(&observe, "observe", false, "run again with metrics and tracing on (every trace exported over OTLP/HTTP to a local receiver), in turns with both off, and print every round, both medians and bench.observability_overhead_pct")
	f.IntVar(&observeRounds, "observe-rounds", 3, "rounds of off and on with --observe (at least 3)")
	f.Float64Var(&observeRatio, "observe-sample-ratio", 1, "trace sample ratio of --observe's traced rounds (1: every trace)")
	f.IntSliceVar(&workers, "workers", nil, "measure against the server of --nats with this many `toolq worker` processes instead, one round per count (e.g. 1,2,4); figures end in _workers_N. With --scenario concurrency or ratelimit: that scenario with this many worker processes (one count; 0 is the scenario's own, 8 or 3), one of them killed with SIGKILL in concurrency")
	f.StringVar(&workerProfiles, "worker-cpuprofiles", "", "with --workers or --cluster-server: each worker process writes its CPU profile (pprof) into this directory as <its name>.pprof when it stops (the bench's own: --cpuprofile)")
	f.IntVar(&serverPID, "server-pid", 0, "with --workers: the process id of the --nats server when it runs on this host; its CPU per job is then printed apart (bench.cpu_per_job_server)")
	f.StringVar(&clusterBin, "cluster-server", "", "instead, start a cluster of nats-server processes of this executable (`make nats-server` builds the pinned one), measure with --cluster-workers worker processes on replicated streams, then kill the jobs stream's leader under a steady load: figures end in _cluster, and bench.leader_failover_stall_ms")
	f.IntVar(&clusterNodes, "cluster-nodes", 3, "nodes (and stream replicas) of --cluster-server")
	f.IntVar(&clusterWork, "cluster-workers", 2, "worker processes of --cluster-server")
	f.DurationVar(&failoverFor, "failover-for", 10*time.Second, "how long --cluster-server's steady load runs after the leader is killed")
	f.StringVar(&failoverMode, "failover", bench.FailoverKill, "how --cluster-server's jobs stream leader leaves: kill (SIGKILL, a crash: figures leader_failover_*) or lameduck (lame duck mode, as a rolling upgrade of the servers: figures leader_lameduck_*)")
	return cmd
}

// scenarioProcesses is bench --scenario concurrency|ratelimit --workers N:
// the scenario against the server --nats names, its workers in processes
// of their own.
func scenarioProcesses(cmd *cobra.Command, g *globals, scenario string, flow bench.FlowConfig, workers []int, workerProfiles string) error {
	if len(workers) != 1 {
		return contracts.Errorf(contracts.CodeInvalidInput, "--scenario with --workers takes one count of worker processes")
	}
	opts, err := g.auth.options()
	if err != nil {
		return err
	}
	figs, err := bench.RunScenarioProcesses(cmd.Context(), scenario, bench.FlowProcConfig{
		FlowConfig: flow, URL: g.natsURL, Options: opts, Prefix: g.prefix, Workers: workers[0], Start: workerProcesses(g, workerProfiles),
	})
	if err != nil {
		return err
	}
	return printFigures(g, figs)
}

// scaleOut is bench --workers: the requester here, the workers in
// processes of their own, the server the one --nats names.
func scaleOut(cmd *cobra.Command, g *globals, cfg bench.Config, workers []int, workerProfiles string, serverPID int) error {
	if cmd.Flags().Changed("tenants") || cmd.Flags().Changed("metrics") {
		return contracts.Errorf(contracts.CodeInvalidInput, "--workers measures plain throughput: drop --tenants and --metrics")
	}
	opts, err := g.auth.options()
	if err != nil {
		return err
	}
	figs, err := bench.RunScaleOut(cmd.Context(), bench.ScaleOutConfig{
		Config: cfg, URL: g.natsURL, Options: opts, Workers: workers, Start: workerProcesses(g, workerProfiles), ServerPID: serverPID,
	})
	if err != nil {
		return err
	}
	if g.jsonOut {
		out := make([]map[string]any, 0, len(figs))
		for _, f := range figs {
			out = append(out, map[string]any{"name": "bench." + f.Name, "value": f.Value, "unit": f.Unit})
		}
		return g.printJSON(map[string]any{"figures": out})
	}
	for _, f := range figs {
		fmt.Fprintln(g.stdout, f)
	}
	return nil
}

// throughputOf is the e2e_throughput figure of a run.
func throughputOf(figs []bench.Figure) float64 {
	for _, f := range figs {
		if f.Name == "e2e_throughput" {
			return f.Value
		}
	}
	return 0
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func readAnchors(path string) (map[string]float64, error) {
	fh, err := os.Open(path) //nolint:gosec // G304: the operator names the anchors file
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 || !strings.HasPrefix(fs[0], "anchor.") {
			continue
		}
		v, err := strconv.ParseFloat(fs[1], 64)
		if err != nil {
			continue
		}
		out[strings.TrimPrefix(fs[0], "anchor.")] = v
	}
	return out, sc.Err()
}

// printFigures prints figures as the bench does: one line each, or one
// JSON document with --json.
func printFigures(g *globals, figs []bench.Figure) error {
	if g.jsonOut {
		out := make([]map[string]any, 0, len(figs))
		for _, f := range figs {
			out = append(out, map[string]any{"name": "bench." + f.Name, "value": f.Value, "unit": f.Unit})
		}
		return g.printJSON(map[string]any{"figures": out})
	}
	for _, f := range figs {
		fmt.Fprintln(g.stdout, f)
	}
	return nil
}

// alternateCPU is alternate that also keeps each round's CPU a job, off
// (cpus[0]) and on (cpus[1]), and their per-round overhead in percent
// (cpus[2]).
func alternateCPU(cmd *cobra.Command, g *globals, cfg, on bench.Config, rounds int, off0, cpu0 float64) (offs, ons, ratios []float64, cpus [3][]float64, err error) {
	offCPU := cpu0
	for i := range rounds {
		off := off0
		if i > 0 {
			g.tell("bench: observability off, round %d of %d", i+1, rounds)
			ofigs, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return nil, nil, nil, cpus, err
			}
			off, offCPU = throughputOf(ofigs), figureOf(ofigs, "cpu_per_job")
		}
		g.tell("bench: observability on, round %d of %d", i+1, rounds)
		mfigs, err := bench.Run(cmd.Context(), on)
		if err != nil {
			return nil, nil, nil, cpus, err
		}
		onCPU := figureOf(mfigs, "cpu_per_job")
		offs, ons = append(offs, off), append(ons, throughputOf(mfigs))
		cpus[0], cpus[1] = append(cpus[0], offCPU), append(cpus[1], onCPU)
		if offCPU > 0 {
			cpus[2] = append(cpus[2], (onCPU/offCPU-1)*100)
		}
		if off > 0 {
			ratios = append(ratios, ons[i]/off)
			g.tell("bench: round %d: off %.0f jobs/s (%.1f us CPU a job), on %.0f jobs/s (%.1f us), ratio %.3f",
				i+1, off, offCPU, ons[i], onCPU, ons[i]/off)
		}
	}
	return offs, ons, ratios, cpus, nil
}

func figureOf(figs []bench.Figure, name string) float64 {
	for _, f := range figs {
		if f.Name == name {
			return f.Value
		}
	}
	return 0
}

// alternate runs on and cfg (off) in turns, rounds times, and returns the
// throughputs of each and the rounds' on/off ratios. off0 is the first
// off round's throughput, measured before.
func alternate(cmd *cobra.Command, g *globals, cfg, on bench.Config, what string, rounds int, off0 float64) (offs, ons, ratios []float64, err error) {
	off := off0
	for i := range rounds {
		if i > 0 {
			g.tell("bench: %s off, round %d of %d", what, i+1, rounds)
			ofigs, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return nil, nil, nil, err
			}
			off = throughputOf(ofigs)
		}
		g.tell("bench: %s on, round %d of %d", what, i+1, rounds)
		mfigs, err := bench.Run(cmd.Context(), on)
		if err != nil {
			return nil, nil, nil, err
		}
		offs, ons = append(offs, off), append(ons, throughputOf(mfigs))
		if off > 0 {
			ratios = append(ratios, ons[i]/off)
			g.tell("bench: round %d: off %.0f jobs/s, on %.0f jobs/s, ratio %.3f", i+1, off, ons[i], ons[i]/off)
		}
	}
	return offs, ons, ratios, nil
}
