// Package schedulertest is the test suite every scheduler engine passes,
// against real servers: an embedded nats-server per test and whatever the
// engine's Driver starts (a real redis-server for asynq). Only tests may
// import it.
//
// # Timing
//
// The suite waits on real time only where time is what is tested (a firing
// due in a second, an outage of three fire times); everything else waits on
// jobs arriving in the stream, with deadlines.
package schedulertest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/scheduler"
)

// Backend is what an engine needs besides NATS (Redis for asynq).
type Backend interface {
	// Stop stops the backend; its data is lost.
	Stop()
	// Start starts it again, empty, at the same address.
	Start()
}

// Driver builds engines of one kind for the suite.
type Driver interface {
	// Backend starts the backend of one test, or returns nil when the
	// engine has none.
	Backend(t *testing.T) Backend
	// New returns a new, unstarted engine on nc.
	New(t *testing.T, nc *nats.Conn, b Backend) scheduler.Scheduler
}

// Run runs the suite on d. Every test is parallel.
func Run(t *testing.T, d Driver) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, Driver)
	}{
		{"DelayedFiresOnTime", testDelayed},
		{"EveryFiresOncePerInterval", testEvery},
		{"CronWithTimeZone", testCron},
		{"DeleteStopsFirings", testDelete},
		{"PauseSkipsFiringsResumeGoesOn", testPause},
		{"TwoInstancesOneJobPerFiring", testTwoInstances},
		{"RestartKeepsSchedulesAndCatchesUpOnce", testRestart},
		{"SameInstanceStartsAgain", testStartAgain},
		{"BackendRestart", testBackendRestart},
		{"NATSRestartKeepsSchedules", testNATSRestart},
		{"BadInputRefused", testBadInput},
		{"CreateListGetDelete", testCRUD},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, d)
		})
	}
}

// bundle is what one test works with.
type bundle struct {
	d       Driver
	backend Backend
	natsSrv *natsServer
	nc      *nats.Conn
	tool    string
	jobs    *collector
}

func setup(t *testing.T, d Driver) *bundle {
	t.Helper()
	srv := startNATS(t, t.TempDir())
	nc := srv.connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := ctxT(t, 10*time.Second)
	bc, err := bus.Config{}.WithDefaults()
	require.NoError(t, err)
	require.NoError(t, bus.Ensure(ctx, js, bc))
	b := &bundle{d: d, natsSrv: srv, nc: nc, tool: "sched.t" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}
	b.backend = d.Backend(t)
	b.jobs = collect(t, js, contracts.Subjects{}.TenantJobLanes("", b.tool, contracts.PriorityNormal))
	return b
}

// engine starts a new engine instance, stopped at the end of the test.
func (b *bundle) engine(t *testing.T) scheduler.Scheduler {
	t.Helper()
	e := b.d.New(t, b.nc, b.backend)
	require.NoError(t, e.Start(ctxT(t, 15*time.Second)))
	t.Cleanup(func() { stop(t, e) })
	return e
}

func stop(t *testing.T, e scheduler.Scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, e.Stop(ctx))
	select {
	case <-e.Stopped():
	default:
		t.Fatal("Stopped not closed after Stop")
	}
}

func (b *bundle) schedule(s scheduler.Schedule) *scheduler.Schedule {
	s.Job.Tool = b.tool
	if s.Job.Input == nil {
		s.Job.Input = []byte(`{"from":"schedule"}`)
	}
	return &s
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// job is one job message seen on the tool's subject.
type job struct {
	ID       string
	FireTime time.Time // from the job's meta
	Stored   time.Time // when JetStream stored it
	MsgID    string
}

// collector records every job message of one tool, acking each.
type collector struct {
	mu     sync.Mutex
	jobs   []job
	notify chan struct{}
}

// collect consumes the jobs of subjects (every session lane of a tool: a
// firing goes on its session's lane) as a worker of the tool would.
func collect(t *testing.T, js jetstream.JetStream, subjects []string) *collector {
	t.Helper()
	c := &collector{notify: make(chan struct{}, 1)}
	ctx := ctxT(t, 10*time.Second)
	cons, err := js.CreateOrUpdateConsumer(ctx, contracts.Subjects{}.JobsStream(), jetstream.ConsumerConfig{
		Durable: "suite", FilterSubjects: subjects, AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		j, err := contracts.DecodeJob(m.Data())
		if err != nil {
			_ = m.Term()
			return
		}
		md, _ := m.Metadata()
		ft, _ := time.Parse(time.RFC3339, j.Meta[scheduler.MetaFireTime])
		rec := job{ID: j.ID, FireTime: ft, MsgID: m.Headers().Get(jetstream.MsgIDHeader)}
		if md != nil {
			rec.Stored = md.Timestamp
		}
		c.mu.Lock()
		c.jobs = append(c.jobs, rec)
		c.mu.Unlock()
		select {
		case c.notify <- struct{}{}:
		default:
		}
		_ = m.Ack()
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	return c
}

func (c *collector) all() []job {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]job(nil), c.jobs...)
}

// waitFor waits until cond holds for the jobs seen, or fails at the deadline.
func (c *collector) waitFor(t *testing.T, within time.Duration, what string, cond func([]job) bool) []job {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		js := c.all()
		if cond(js) {
			return js
		}
		select {
		case <-c.notify:
		case <-deadline.C:
			t.Fatalf("%s: not within %s; jobs: %v", what, within, ids(c.all()))
		}
	}
}

func (c *collector) waitN(t *testing.T, n int, within time.Duration) []job {
	t.Helper()
	return c.waitFor(t, within, fmt.Sprintf("%d jobs", n), func(js []job) bool { return len(js) >= n })
}

func ids(js []job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// requireOnePerFiring checks that every job was enqueued once and that its
// id and Nats-Msg-Id are "<schedule>-<fire unix>".
func requireOnePerFiring(t *testing.T, scheduleID string, js []job) {
	t.Helper()
	seen := map[string]bool{}
	for _, j := range js {
		require.False(t, seen[j.ID], "job %s enqueued twice", j.ID)
		seen[j.ID] = true
		require.Equal(t, j.ID, j.MsgID)
		require.Equal(t, scheduleID+"-"+strconv.FormatInt(j.FireTime.Unix(), 10), j.ID)
	}
}

// sleepUntil waits for the wall clock; the suite uses it only to let fire
// times pass during an outage it made.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// natsServer is an embedded nats-server on a fixed loopback port, so a
// restart on the same store keeps its clients' URL.
type natsServer struct {
	mu   sync.Mutex
	srv  *server.Server
	dir  string
	port int
}

func startNATS(t *testing.T, dir string) *natsServer {
	t.Helper()
	// Port -1: the server picks a free port itself and keeps it across
	// restarts. Picking one here and closing it raced with the parallel
	// tests, which could take it first ("nats-server not ready").
	s := &natsServer{dir: dir, port: -1}
	s.start(t)
	t.Cleanup(s.shutdown)
	return s
}

func (s *natsServer) start(t *testing.T) {
	t.Helper()
	opts := &server.Options{
		ServerName: "toolq-sched-test", Host: "127.0.0.1", Port: s.port,
		JetStream: true, StoreDir: s.dir, NoLog: true, NoSigs: true,
	}
	ns, err := server.NewServer(opts)
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second), "nats-server not ready")
	s.mu.Lock()
	if s.port == -1 {
		s.port = ns.Addr().(*net.TCPAddr).Port
	}
	s.srv = ns
	s.mu.Unlock()
}

func (s *natsServer) shutdown() {
	s.mu.Lock()
	ns := s.srv
	s.srv = nil
	s.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

func (s *natsServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *natsServer) connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}
