// Package integration holds black-box tests over real processes: toolq
// workers built from this repository and nats-server, killed and restarted.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

var (
	toolqOnce sync.Once
	toolqBin  string
	toolqErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "toolq-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// toolq builds the toolq binary of this checkout once per test run.
func toolq(t *testing.T) string {
	t.Helper()
	toolqOnce.Do(func() {
		toolqBin = filepath.Join(binDir, "toolq")
		cmd := exec.Command("go", "build", "-o", toolqBin, "github.com/toolq/toolq/cmd/toolq")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			toolqErr = fmt.Errorf("go build toolq: %w: %s", err, out.String())
		}
	})
	require.NoError(t, toolqErr)
	return toolqBin
}

// proc is a child process of a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  bytes.Buffer
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// kill sends SIGKILL: the process dies at once, holding whatever it held.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// startWorker runs `toolq worker` as a process against url.
func startWorker(t *testing.T, url, name, keyFile string, extra ...string) *proc {
	t.Helper()
	args := append([]string{
		"--nats", url, "--log-level", "debug", "worker", "--name", name, "--builtins",
		"--snapshot-key-file", keyFile, "--ack-wait", "2s", "--lease-ttl", "2s", "--stop-timeout", "2s",
	}, extra...)
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(toolq(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.Env = append(os.Environ(), "XAI_API_KEY=", "OPENAI_API_KEY=", "GEMINI_API_KEY=", "GOOGLE_API_KEY=", "ANTHROPIC_API_KEY=")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- output of worker %s ---\n%s", name, p.output())
		}
	})
	// The worker logs "worker started" once it is consuming.
	deadline := time.Now().Add(60 * time.Second)
	for !bytes.Contains([]byte(p.output()), []byte("worker started")) {
		select {
		case <-p.done:
			t.Fatalf("worker %s exited: %s", name, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s did not start: %s", name, p.output())
		}
		time.Sleep(20 * time.Millisecond) // polling an external process
	}
	return p
}

type env struct {
	srv     *testutil.ServerProcess
	nc      *nats.Conn
	prod    *producer.Producer
	keyFile string
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := testutil.StartServerProcess(t, t.TempDir())
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	prod, err := producer.New(nc, &producer.Config{Session: "it", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	key := filepath.Join(t.TempDir(), "snapshot.key")
	require.NoError(t, os.WriteFile(key, []byte("0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"), 0o600))
	return &env{srv: srv, nc: nc, prod: prod, keyFile: key}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// restartServer kills the NATS server process and starts it again on the
// same port and store; it returns the URL.
func (e *env) restartServer(t *testing.T) string {
	t.Helper()
	e.srv = e.srv.Restart(t)
	require.Eventually(t, e.nc.IsConnected, 30*time.Second, 20*time.Millisecond)
	return e.srv.URL()
}
