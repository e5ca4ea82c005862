package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// ClusterConfig sizes a run on a cluster of nats-server processes that the
// bench starts itself: the shape a production deployment has (R3 streams
// on three nodes, file storage), measured with worker processes, and then
// the stall that follows the loss of the jobs stream's leader.
type ClusterConfig struct {
	Config
	// ServerBin is the nats-server executable (built from the module
	// version toolq pins: `make nats-server`).
	ServerBin string
	// Nodes is the cluster's size (3 when 0).
	Nodes int
	// Workers is the number of worker processes (2 when 0).
	Workers int
	// Start starts a worker process; it is given `--replicas <Nodes>`.
	Start StartWorker
	// FailoverInterval is the pause between the jobs of the failover run,
	// a steady load (5 ms when 0); FailoverFor is how long the load runs
	// after the leader is killed (10 s when 0).
	FailoverInterval time.Duration
	FailoverFor      time.Duration
	// Failover is how the leader goes: FailoverKill (the default) or
	// FailoverLameDuck.
	Failover string
}

// How the jobs stream's leader leaves in the failover run.
const (
	// FailoverKill SIGKILLs it: a crash, and JetStream's Raft election
	// (4–9 s without the leader's heartbeat) before a new leader answers.
	// Its figures start with leader_failover_.
	FailoverKill = "kill"
	// FailoverLameDuck puts it in lame duck mode (SIGUSR2), as a rolling
	// upgrade of the servers does: it hands its leaderships over, stops
	// taking connections, and after a grace period of 1 s closes its
	// clients over 30 s and exits. Its figures start with leader_lameduck_.
	FailoverLameDuck = "lameduck"
)

func (c *ClusterConfig) withDefaults() error {
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.FailoverInterval == 0 {
		c.FailoverInterval = 5 * time.Millisecond
	}
	if c.FailoverFor == 0 {
		c.FailoverFor = 10 * time.Second
	}
	if c.Failover == "" {
		c.Failover = FailoverKill
	}
	switch {
	case c.Failover != FailoverKill && c.Failover != FailoverLameDuck:
		return fmt.Errorf("bench: failover %q: want %s or %s", c.Failover, FailoverKill, FailoverLameDuck)
	case c.ServerBin == "":
		return errors.New("bench: a cluster run needs a nats-server executable")
	case c.Nodes < 3 || c.Nodes > 5:
		return fmt.Errorf("bench: %d cluster nodes: want 3 to 5", c.Nodes)
	case c.Workers < 1 || c.Workers > 16:
		return fmt.Errorf("bench: %d workers: want 1 to 16", c.Workers)
	case c.Start == nil:
		return errors.New("bench: a cluster run needs a way to start workers")
	case c.Jobs < 1 || c.Submitters < 1 || c.Concurrency < 1 || c.LatencyJobs < 0:
		return errors.New("bench: jobs, submitters and concurrency must be positive")
	case c.FailoverInterval < time.Millisecond || c.FailoverFor < time.Second:
		return errors.New("bench: the failover load wants an interval of at least 1ms and at least 1s after the kill")
	}
	if _, err := os.Stat(c.ServerBin); err != nil {
		return fmt.Errorf("bench: nats-server executable: %w", err)
	}
	return nil
}

// RunCluster starts a cluster of cfg.Nodes nats-server processes, measures
// throughput and latency with cfg.Workers worker processes on R<Nodes>
// streams (figures ending in _cluster), then keeps a steady load of jobs
// going, SIGKILLs the server that leads the jobs stream (or puts it in lame
// duck mode: cfg.Failover), and reports the longest time no job completed
// (leader_failover_stall_ms, or leader_lameduck_stall_ms) and that every
// job submitted completed exactly once.
func RunCluster(ctx context.Context, cfg ClusterConfig) (_ []Figure, err error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	cfg.phase("starting a cluster of %d nats-server processes", cfg.Nodes)
	cl, err := startCluster(ctx, cfg.ServerBin, cfg.Nodes)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	nc, err := nats.Connect(cl.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("bench: connect to the cluster: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := waitMetaLeader(ctx, js); err != nil {
		return nil, err
	}
	p, err := producer.New(nc, &producer.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer p.Close()

	cfg.phase("starting %d worker processes (concurrency %d each, R%d streams)", cfg.Workers, cfg.Concurrency, cfg.Nodes)
	var procs []*WorkerProcess
	defer func() {
		cfg.phase("stopping %d worker processes", len(procs))
		for _, wp := range procs {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			err = errors.Join(err, wp.Stop(sctx))
			cancel()
		}
	}()
	for i := range cfg.Workers {
		wp, err := cfg.Start(ctx, cl.url(), fmt.Sprintf("bench-cluster-%d", i+1), cfg.Concurrency, "--replicas", strconv.Itoa(cfg.Nodes))
		if err != nil {
			return nil, err
		}
		procs = append(procs, wp)
	}
	st, err := js.Stream(ctx, contracts.Subjects{}.JobsStream())
	if err != nil {
		return nil, err
	}
	if r := st.CachedInfo().Config.Replicas; r != cfg.Nodes {
		return nil, fmt.Errorf("bench: the jobs stream has %d replicas, want %d (start the workers with --replicas %d)", r, cfg.Nodes, cfg.Nodes)
	}
	payload, _ := json.Marshal(map[string]string{"pad": pad(cfg.PayloadBytes)})
	cfg.phase("warming up: 50 jobs")
	if _, err := latency(ctx, p, payload, 50, 0); err != nil {
		return nil, err
	}
	redeliveredBefore := redelivered(ctx, js)
	cfg.phase("throughput: %d jobs from %d submitters, %d workers", cfg.Jobs, cfg.Submitters, cfg.Workers)
	tf, err := throughput(ctx, p, cfg.Config, payload)
	if err != nil {
		return nil, err
	}
	var figs []Figure
	for _, f := range tf {
		f.Name += "_cluster"
		figs = append(figs, f)
	}
	if cfg.LatencyJobs > 0 {
		cfg.phase("latency: %d jobs, one every %s", cfg.LatencyJobs, cfg.LatencyInterval)
		lf, err := latencyFigures(ctx, p, payload, cfg.Config, "_cluster")
		if err != nil {
			return nil, err
		}
		figs = append(figs, lf...)
	}
	figs = append(figs, Figure{"redelivered_cluster", float64(redelivered(ctx, js) - redeliveredBefore), "jobs"})
	ff, err := failover(ctx, cfg, cl, js, p, payload)
	if err != nil {
		return nil, err
	}
	cfg.phase("done")
	return append(figs, ff...), nil
}

// failover runs a steady load of jobs, kills the jobs stream's leader a
// second in, and measures what the requester saw.
func failover(ctx context.Context, cfg ClusterConfig, cl *cluster, js jetstream.JetStream, p *producer.Producer, payload json.RawMessage) ([]Figure, error) {
	session := "failover-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var (
		mu        sync.Mutex
		completed []time.Time // when the requester received each job's terminal event
		ended     []time.Time // when the worker wrote it (the event's time)
		terminal  = map[string]int{}
		latencies []time.Duration
		submitted = map[string]time.Time{}
	)
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	var rg errgroup.Group
	rg.Go(func() error {
		err := p.ReadEvents(rctx, session, &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
			if !ev.Data.Status.Terminal() {
				return nil
			}
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			terminal[ev.Data.JobID]++
			if terminal[ev.Data.JobID] == 1 {
				completed = append(completed, now)
				ended = append(ended, ev.Time)
				if t, ok := submitted[ev.Data.JobID]; ok {
					latencies = append(latencies, now.Sub(t))
				}
			}
			return nil
		})
		if rctx.Err() != nil {
			return nil
		}
		return err
	})

	redeliveredBefore := redelivered(ctx, js)
	leader, err := jobsLeader(ctx, js)
	if err != nil {
		return nil, err
	}
	victim := cl.byName(leader)
	if victim == nil {
		return nil, fmt.Errorf("bench: the jobs stream's leader %q is not a server of this cluster", leader)
	}
	leave, left, prefix := victim.kill, "killed", "leader_failover_"
	if cfg.Failover == FailoverLameDuck {
		leave, left, prefix = victim.lameDuck, "put in lame duck mode", "leader_lameduck_"
	}
	cfg.phase("failover: a job every %s, the jobs stream's leader (%s) %s after 1s, %s more of load", cfg.FailoverInterval, leader, left, cfg.FailoverFor)
	var killedAt time.Time
	start := time.Now()
	var sg errgroup.Group
	sg.SetLimit(64)
	tick := time.NewTicker(cfg.FailoverInterval)
	defer tick.Stop()
	for i := 0; ; i++ {
		now := time.Now()
		if killedAt.IsZero() && now.Sub(start) >= time.Second {
			leave()
			killedAt = time.Now()
		}
		if !killedAt.IsZero() && now.Sub(killedAt) >= cfg.FailoverFor {
			break
		}
		id := fmt.Sprintf("%s-%d", session, i)
		mu.Lock()
		submitted[id] = now
		mu.Unlock()
		// A submit that fails while leaders are elected is retried with
		// the same id: enqueued once, whatever the first try did.
		sg.Go(func() error { return submitRetrying(ctx, p, id, session, payload) })
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	loadEnd := time.Now()
	if err := sg.Wait(); err != nil {
		return nil, err
	}
	total := len(submitted)
	cfg.phase("failover: waiting for the %d jobs to complete", total)
	var events *bus.Events // made when first needed: the cluster may still elect
	// A job counts as ended once the requester received its terminal
	// event, or once that event is found stored: the requester's session
	// follower may itself be recovering from the kill (an R1 consumer on
	// the dead server), and what it has not received yet is not lost.
	// Lost is a job with no terminal event stored two minutes on.
	stored := map[string]bool{}
	unended := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for id := range submitted {
			if terminal[id] == 0 && !stored[id] {
				out = append(out, id)
			}
		}
		return out
	}
	deadline := time.Now().Add(2 * time.Minute)
	for lookAt := time.Now().Add(5 * time.Second); ; {
		left := unended()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		if events == nil && time.Now().After(lookAt) {
			ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
			events, _ = bus.NewEvents(ectx, js, contracts.Subjects{})
			cancel()
		}
		if events != nil && time.Now().After(lookAt) {
			for _, id := range left {
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				ev, _, err := events.Last(lctx, session, id)
				cancel()
				if err == nil && ev != nil && ev.Data.Status.Terminal() {
					mu.Lock()
					stored[id] = true
					mu.Unlock()
				}
			}
			lookAt = time.Now().Add(5 * time.Second)
		}
		select {
		case <-time.After(50 * time.Millisecond): // the events arrive on the reader
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	lost := len(unended())
	// A second more, so a duplicate terminal event would be seen too.
	time.Sleep(time.Second)
	stopReading()
	if err := rg.Wait(); err != nil {
		return nil, fmt.Errorf("bench: failover events: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	dups, unreceived := 0, 0
	for _, n := range terminal {
		dups += n - 1
	}
	for id := range stored {
		if terminal[id] == 0 {
			unreceived++
		}
	}
	// The stalls: the longest time no job ended on a worker (the event's
	// time), and the longest the requester received none, while the load
	// ran. A job whose delivery the dead leader took with it completes
	// only after its ack wait; it is counted in the latency's maximum, not
	// here.
	from := killedAt.Add(-200 * time.Millisecond)
	slices.Sort(latencies)
	return []Figure{
		{prefix + "stall_ms", ms(longestGap(ended, from, loadEnd)), "ms"},
		{prefix + "requester_stall_ms", ms(longestGap(completed, from, loadEnd)), "ms"},
		{prefix + "latency_p50", ms(pct(latencies, 50)), "ms"},
		{prefix + "latency_max", ms(pct(latencies, 100)), "ms"},
		{prefix + "jobs", float64(total), "jobs"},
		{prefix + "lost", float64(lost), "jobs"},
		{prefix + "unreceived", float64(unreceived), "jobs"},
		{prefix + "redelivered", float64(redelivered(ctx, js) - redeliveredBefore), "jobs"},
		{prefix + "duplicates", float64(dups), "events"},
	}, nil
}

// longestGap is the longest time between consecutive times of ts (in any
// order) from from on, counting up to the first one after end, or up to
// end when none is later.
func longestGap(ts []time.Time, from, end time.Time) time.Duration {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	prev := from
	for _, t := range ts {
		if t.Before(from) {
			continue
		}
		gap = max(gap, t.Sub(prev))
		prev = t
		if t.After(end) {
			return gap
		}
	}
	return max(gap, end.Sub(prev))
}

// submitRetrying submits a noop job with the given id until the bus takes
// it (a submit times out while the stream elects a leader).
func submitRetrying(ctx context.Context, p *producer.Producer, id, session string, payload json.RawMessage) error {
	deadline := time.Now().Add(time.Minute)
	for {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := p.Submit(sctx, worker.ToolNoop, payload, &producer.SubmitOpts{ID: id, Session: session})
		cancel()
		if err == nil || errors.Is(err, producer.ErrDuplicate) {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("bench: submit %s: %w", id, err)
		}
		time.Sleep(50 * time.Millisecond) // the cluster elects leaders
	}
}

// jobsLeader is the name of the server leading the jobs stream.
func jobsLeader(ctx context.Context, js jetstream.JetStream) (string, error) {
	st, err := js.Stream(ctx, contracts.Subjects{}.JobsStream())
	if err != nil {
		return "", err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return "", err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", errors.New("bench: the jobs stream has no leader")
	}
	return info.Cluster.Leader, nil
}

// waitMetaLeader waits until the cluster answers JetStream requests (it
// has a meta leader).
func waitMetaLeader(ctx context.Context, js jetstream.JetStream) error {
	deadline := time.Now().Add(time.Minute)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: JetStream of the cluster not ready: %w", err)
		}
		select {
		case <-time.After(100 * time.Millisecond): // polling the cluster
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cluster is nats-server processes routed to each other.
type cluster struct {
	dir   string
	nodes []*node
}

type node struct {
	name string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func (n *node) kill() {
	select {
	case <-n.done:
	default:
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.done
	}
}

// lameDuck puts the server in lame duck mode (nats-server's SIGUSR2, what
// `nats-server --signal ldm` sends); it exits by itself once its clients
// are moved.
func (n *node) lameDuck() {
	select {
	case <-n.done:
	default:
		_ = n.cmd.Process.Signal(syscall.SIGUSR2)
	}
}

func (c *cluster) url() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = "nats://127.0.0.1:" + strconv.Itoa(n.port)
	}
	return strings.Join(urls, ",")
}

func (c *cluster) byName(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		n.kill()
	}
	_ = os.RemoveAll(c.dir)
}

// startCluster starts n nats-server processes of bin on loopback, each with
// JetStream on a store of its own, routed to each other, and returns once
// each accepts connections.
func startCluster(ctx context.Context, bin string, n int) (_ *cluster, err error) {
	dir, err := os.MkdirTemp("", "toolq-bench-cluster-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	ports, err := freePorts(ctx, 2*n)
	if err != nil {
		return nil, err
	}
	clients, routes := ports[:n], ports[n:]
	var routeURLs []string
	for _, p := range routes {
		routeURLs = append(routeURLs, "nats://127.0.0.1:"+strconv.Itoa(p))
	}
	// Lame duck mode as a rolling upgrade would set it, short: a second's
	// grace, then the clients moved over thirty (the least nats-server takes).
	conf := filepath.Join(dir, "lameduck.conf")
	if err := os.WriteFile(conf, []byte("lame_duck_grace_period: \"1s\"\nlame_duck_duration: \"30s\"\n"), 0o600); err != nil {
		return nil, err
	}
	for i := range n {
		name := fmt.Sprintf("toolq-bench-%d", i+1)
		store := filepath.Join(dir, name)
		cmd := exec.CommandContext(ctx, bin, //nolint:gosec // G204: the operator names the server executable
			"-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(clients[i]), "-js", "-sd", store, "-n", name,
			"--cluster_name", "toolq-bench", "--cluster", routeURLs[i], "--routes", strings.Join(routeURLs, ","))
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("bench: start nats-server: %w", err)
		}
		nd := &node{name: name, port: clients[i], cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(nd.done) }()
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		if err := waitListening(ctx, nd); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// waitListening polls a starting server's client port.
func waitListening(ctx context.Context, nd *node) error {
	deadline := time.Now().Add(30 * time.Second)
	addr := "127.0.0.1:" + strconv.Itoa(nd.port)
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-nd.done:
			return fmt.Errorf("bench: nats-server %s exited at start", nd.name)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: nats-server %s does not listen: %w", nd.name, err)
		}
		select {
		case <-time.After(20 * time.Millisecond): // polling a starting process
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func freePorts(ctx context.Context, n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
