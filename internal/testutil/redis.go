package testutil

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Redis is a real redis-server process on a loopback port, without
// persistence: a restart loses every key, as a crashed cache would.
type Redis struct {
	tb   testing.TB
	port int
	dir  string // set: an append-only file there keeps the data across restarts

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartRedis starts redis-server (which must be on PATH; the test is skipped
// when it is not) on a free loopback port. It is stopped when the test ends.
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	return startRedis(tb, "")
}

// StartRedisWithData is StartRedis with an append-only file synced on every
// write: Stop and Start bring the server back with its data, as a restarted
// Redis with persistence would.
func StartRedisWithData(tb testing.TB) *Redis {
	tb.Helper()
	return startRedis(tb, tb.TempDir())
}

func startRedis(tb testing.TB, dir string) *Redis {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	r := &Redis{tb: tb, port: port, dir: dir}
	r.Start()
	tb.Cleanup(r.Stop)
	return r
}

// Addr is host:port of the server.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// URL is the redis:// URL of the server.
func (r *Redis) URL() string { return "redis://" + r.Addr() + "/0" }

// Start (re)starts the server on its port and waits until it answers PING.
// It is a no-op while the server runs.
func (r *Redis) Start() {
	r.tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return
	}
	persist := []string{"--appendonly", "no", "--dir", r.tb.TempDir()}
	if r.dir != "" {
		persist = []string{"--appendonly", "yes", "--appendfsync", "always", "--dir", r.dir}
	}
	cmd := exec.Command("redis-server", append([]string{
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--daemonize", "no", "--loglevel", "warning",
	}, persist...)...)
	if err := cmd.Start(); err != nil {
		r.tb.Fatalf("start redis-server: %v", err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := ping(r.Addr()); err == nil {
			return
		} else if time.Now().After(deadline) {
			r.tb.Fatalf("redis-server on %s did not answer: %v", r.Addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit. Its keys are lost unless
// it was started by StartRedisWithData.
func (r *Redis) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// Restart stops the server and starts an empty one on the same port.
func (r *Redis) Restart() {
	r.tb.Helper()
	r.Stop()
	r.Start()
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}
