package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/toolq/toolq/cmd/toolq/internal/bench"
)

// childEnv is added to the environment of the worker processes bench
// starts (the CLI's tests make their test binary act as toolq with it).
var childEnv []string

// workerProcesses starts `toolq worker` processes of this very binary for
// bench --workers, logging in as this command does; with a profiles
// directory, each writes its CPU profile there as <name>.pprof.
func workerProcesses(g *globals, profiles string) bench.StartWorker {
	return func(ctx context.Context, url, name string, concurrency int, extra ...string) (*bench.WorkerProcess, error) {
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
		if profiles != "" {
			args = append(args, "--cpuprofile", filepath.Join(profiles, name+".pprof"))
		}
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
		exited := make(chan struct{}) // closed once the process ended; exitErr is then its Wait's
		var exitErr error
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
			exitErr = cmd.Wait()
			close(exited)
		}()
		stop := func(ctx context.Context) error {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				if exitErr != nil {
					return fmt.Errorf("bench: worker %s: %w", name, exitErr)
				}
				return nil
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				return fmt.Errorf("bench: worker %s did not stop: %w", name, ctx.Err())
			}
		}
		kill := func() error {
			select {
			case <-exited:
				return fmt.Errorf("bench: worker %s had already exited: %w", name, cmp.Or(exitErr, errors.New("exit 0")))
			default:
			}
			if err := cmd.Process.Kill(); err != nil {
				return fmt.Errorf("bench: kill worker %s: %w", name, err)
			}
			<-exited // its Wait says "signal: killed", as asked
			return nil
		}
		wait, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		select {
		case <-started:
			return &bench.WorkerProcess{Stop: stop, Kill: kill, PID: cmd.Process.Pid}, nil
		case <-exited:
			err := exitErr
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
