package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/toolq/toolq/cmd/toolq/internal/bench"
)

// childEnv is added to the environment of the worker processes bench
// starts (the CLI's tests make their test binary act as toolq with it).
var childEnv []string

// workerProcesses starts `toolq worker` processes of this very binary for
// bench --workers and --cluster-server, logging in as this command does;
// extra are more flags of the worker command (--replicas).
func workerProcesses(g *globals, extra ...string) bench.StartWorker {
	return func(ctx context.Context, url, name string, concurrency int) (func(context.Context) error, error) {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		args := []string{"--nats", url, "--prefix", g.prefix, "--log-level", "info"}
		for flag, v := range map[string]string{"--creds": g.auth.creds, "--nkey-seed": g.auth.nkeySeed, "--tls-ca": g.auth.tlsCA, "--tls-cert": g.auth.tlsCert, "--tls-key": g.auth.tlsKey} {
			if v != "" {
				args = append(args, flag, v)
			}
		}
		args = append(args, "worker", "--name", name, "--builtins", "--no-code-mode", "--no-exec",
			"--concurrency", fmt.Sprint(concurrency), "--stop-timeout", "10s")
		args = append(args, extra...)
		cmd := exec.Command(exe, args...) //nolint:gosec // G204: this binary, with arguments built here
		cmd.Env = append(os.Environ(), childEnv...)
		cmd.Stdout = io.Discard
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("bench: start worker %s: %w", name, err)
		}
		exited := make(chan error, 1)
		started := make(chan struct{})
		var tail strings.Builder
		go func() {
			// The log until it says the worker consumes, then drained so
			// the process never blocks on a full pipe.
			sc := bufio.NewScanner(stderr)
			up := false
			for sc.Scan() {
				line := sc.Text()
				if up {
					continue
				}
				if tail.Len() < 4096 {
					tail.WriteString(line + "\n")
				}
				if strings.Contains(line, "worker started") {
					close(started)
					up = true
				}
			}
			exited <- cmd.Wait()
		}()
		stop := func(ctx context.Context) error {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					return fmt.Errorf("bench: worker %s: %w", name, err)
				}
				return nil
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				return fmt.Errorf("bench: worker %s did not stop: %w", name, ctx.Err())
			}
		}
		wait, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		select {
		case <-started:
			return stop, nil
		case err := <-exited:
			if err == nil {
				err = errors.New("exit 0")
			}
			return nil, fmt.Errorf("bench: worker %s exited before it started (%w): %s", name, err, tail.String())
		case <-wait.Done():
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("bench: worker %s did not start: %w", name, wait.Err())
		}
	}
}
