package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// NATSServerBinary builds nats-server from the module version this
// repository pins (once per machine and version, into the user cache) and
// returns its path. Cluster and fault tests run it as real processes.
func NATSServerBinary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		version := "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, d := range bi.Deps {
				if d.Path == "github.com/nats-io/nats-server/v2" {
					version = d.Version
				}
			}
		}
		if version == "unknown" {
			// Test binaries may carry no module information: ask go.
			out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2").Output()
			if err == nil && len(bytes.TrimSpace(out)) > 0 {
				version = string(bytes.TrimSpace(out))
			}
		}
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		dir = filepath.Join(dir, "toolq-test", "nats-server-"+version)
		buildPath = filepath.Join(dir, "nats-server")
		if _, err := os.Stat(buildPath); err == nil {
			return
		}
		if err := os.MkdirAll(dir, 0o750); err != nil {
			buildErr = err
			return
		}
		tmp := buildPath + ".tmp" + strconv.Itoa(os.Getpid())
		cmd := exec.Command("go", "build", "-o", tmp, "github.com/nats-io/nats-server/v2")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build nats-server: %w: %s", err, out.String())
			return
		}
		buildErr = os.Rename(tmp, buildPath)
	})
	require.NoError(tb, buildErr)
	return buildPath
}

// ServerProcess is a nats-server running as a child process.
type ServerProcess struct {
	Port     int
	StoreDir string
	cmd      *exec.Cmd
	done     chan struct{}
	log      *LockedBuffer
	extra    []string
}

// LockedBuffer is a bytes.Buffer safe to write from one goroutine (a
// process's output copier, a command running in the background) while a
// test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// URL is the client URL of the process.
func (p *ServerProcess) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.Port) }

// StartServerProcess starts nats-server with JetStream on a free loopback
// port and storeDir; it is killed when the test ends. extra are more
// command-line arguments (cluster routes, a config file).
func StartServerProcess(tb testing.TB, storeDir string, extra ...string) *ServerProcess {
	tb.Helper()
	return StartServerProcessOn(tb, FreePort(tb), storeDir, extra...)
}

// Restart kills the process and starts a new one on the same port and
// store, as after a crash; clients reconnect to it.
func (p *ServerProcess) Restart(tb testing.TB) *ServerProcess {
	tb.Helper()
	p.Kill()
	return StartServerProcessOn(tb, p.Port, p.StoreDir, p.extra...)
}

// StartServerProcessOn is StartServerProcess on a given port.
func StartServerProcessOn(tb testing.TB, port int, storeDir string, extra ...string) *ServerProcess {
	tb.Helper()
	bin := NATSServerBinary(tb)
	args := append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", storeDir}, extra...)
	p := &ServerProcess{Port: port, StoreDir: storeDir, done: make(chan struct{}), log: &LockedBuffer{}, extra: extra}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(tb, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	tb.Cleanup(p.Kill)
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(p.URL(), nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return p
		}
		if errors.Is(err, nats.ErrAuthorization) {
			return p // up, and its config wants credentials
		}
		select {
		case <-p.done:
			tb.Fatalf("nats-server exited: %s", p.log.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nats-server did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling an external process
	}
}

// Log returns what the process printed so far.
func (p *ServerProcess) Log() string { return p.log.String() }

// Pid is the process id.
func (p *ServerProcess) Pid() int { return p.cmd.Process.Pid }

// Kill stops the process at once (SIGKILL) and waits for it.
func (p *ServerProcess) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	return FreePorts(tb, 1)[0]
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago (all held open together while they are picked, so none repeats).
func FreePorts(tb testing.TB, n int) []int {
	tb.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(tb, err)
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}
