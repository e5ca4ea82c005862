package shell

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/toolq/toolq/contracts"
)

// Host says where a command runs.
type Host string

// Hosts.
const (
	// HostSandbox runs the command under bubblewrap on the worker: read-only
	// system, a private writable workdir, no network. The default.
	HostSandbox Host = "sandbox"
	// HostWorker runs the command directly on the worker host; only when the
	// worker's policy allows it.
	HostWorker Host = "worker"
)

// Security is the enforcement mode.
type Security string

// Security modes, from strictest to loosest.
const (
	// SecurityDeny refuses every command.
	SecurityDeny Security = "deny"
	// SecurityAllowlist runs a command only when every segment resolves to an
	// allowlisted binary or a safe bin.
	SecurityAllowlist Security = "allowlist"
	// SecurityFull runs anything (environment and host checks still apply).
	SecurityFull Security = "full"
)

// Ask says when a person is asked to approve a command.
type Ask string

// Ask modes, from loosest to strictest.
const (
	// AskOff never asks: an allowlist miss is denied.
	AskOff Ask = "off"
	// AskOnMiss asks for an allowlist miss. The default.
	AskOnMiss Ask = "on-miss"
	// AskAlways asks for every command.
	AskAlways Ask = "always"
)

// Defaults and limits of the exec job (the exec contract).
const (
	// DefaultTimeoutSeconds is the timeout of a job that sets none.
	DefaultTimeoutSeconds = 1800
	// MaxTimeoutSeconds is the longest timeout a job may ask for.
	MaxTimeoutSeconds = int(contracts.MaxJobTimeout / time.Second)
	// DefaultYieldMs is the delay after which a foreground command would be
	// moved to the background.
	DefaultYieldMs = 10000
	// MaxCommandBytes bounds the command text.
	MaxCommandBytes = 64 << 10
	// MaxEnvEntries bounds the number of environment overrides.
	MaxEnvEntries = 64
	// MaxEnvBytes bounds the total size of the environment overrides.
	MaxEnvBytes = 64 << 10
	// MaxInputBytes bounds the encoded job input.
	MaxInputBytes = 256 << 10
)

// Input is the argument of an exec job. Security and Ask, when set, can only
// make the worker's policy stricter (see Effective); empty means "as the
// worker says".
type Input struct {
	// Command is the shell text to run. Required.
	Command string `json:"command"`
	// Workdir is an absolute directory inside one of the policy's workdir
	// roots; empty means the policy's default, or a private scratch
	// directory when it has none.
	Workdir string `json:"workdir,omitempty"`
	// Env holds environment overrides. PATH (any case), LD_* and DYLD_* and
	// other loader or shell-startup variables are refused.
	Env map[string]string `json:"env,omitempty"`
	// Timeout in seconds; 0 means DefaultTimeoutSeconds.
	Timeout int `json:"timeout,omitempty"`
	// Security may only tighten the worker's mode.
	Security Security `json:"security,omitempty"`
	// Ask may only tighten the worker's mode.
	Ask Ask `json:"ask,omitempty"`
	// Host is sandbox (default) or worker.
	Host Host `json:"host,omitempty"`
	// Background returns at once with a session id (handled by the bus layer).
	Background bool `json:"background,omitempty"`
	// YieldMs moves a foreground command to the background after this delay;
	// nil means DefaultYieldMs.
	YieldMs *int `json:"yieldMs,omitempty"`
	// Elevated asks for elevated mode. toolq has none: a job asking for it is
	// denied by Evaluate rather than silently run unelevated.
	Elevated bool `json:"elevated,omitempty"`
	// Pty and Node are seed fields toolq does not support; setting them is
	// invalid_input.
	Pty  bool   `json:"pty,omitempty"`
	Node string `json:"node,omitempty"`
}

// DecodeInput decodes and validates a job's input strictly (unknown fields
// are refused) and applies the defaults. Its errors are *contracts.Error with
// code invalid_input.
func DecodeInput(data []byte) (*Input, error) {
	if len(data) > MaxInputBytes {
		return nil, invalidf("input is %d bytes, more than %d", len(data), MaxInputBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil, invalidf("input is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var in Input
	if err := dec.Decode(&in); err != nil {
		return nil, invalidf("input: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalidf("input: trailing data after the JSON object")
	}
	in.ApplyDefaults()
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return &in, nil
}

// ApplyDefaults fills the contract's defaults: host sandbox, timeout 1800 s,
// yieldMs 10000.
func (in *Input) ApplyDefaults() {
	if in.Host == "" {
		in.Host = HostSandbox
	}
	if in.Timeout == 0 {
		in.Timeout = DefaultTimeoutSeconds
	}
	if in.YieldMs == nil {
		y := DefaultYieldMs
		in.YieldMs = &y
	}
}

// TimeoutDuration returns the job's timeout, with the default applied.
func (in *Input) TimeoutDuration() time.Duration {
	if in.Timeout <= 0 {
		return DefaultTimeoutSeconds * time.Second
	}
	return time.Duration(in.Timeout) * time.Second
}

// Validate checks the input's shape. It does not apply policy: a command the
// policy refuses is a Decision, not a validation error.
func (in *Input) Validate() error {
	if strings.TrimSpace(in.Command) == "" {
		return invalidf("command is required")
	}
	if len(in.Command) > MaxCommandBytes {
		return invalidf("command is %d bytes, more than %d", len(in.Command), MaxCommandBytes)
	}
	if strings.IndexByte(in.Command, 0) >= 0 {
		return invalidf("command contains a NUL byte")
	}
	if in.Workdir != "" {
		if strings.IndexByte(in.Workdir, 0) >= 0 || !filepath.IsAbs(in.Workdir) {
			return invalidf("workdir %q must be an absolute path", clip(in.Workdir))
		}
	}
	if err := validateEnvShape(in.Env); err != nil {
		return err
	}
	if in.Timeout < 0 || in.Timeout > MaxTimeoutSeconds {
		return invalidf("timeout %d s is out of range [1, %d]", in.Timeout, MaxTimeoutSeconds)
	}
	if in.YieldMs != nil && *in.YieldMs < 0 {
		return invalidf("yieldMs must not be negative")
	}
	switch in.Security {
	case "", SecurityDeny, SecurityAllowlist, SecurityFull:
	default:
		return invalidf("security %q: want deny, allowlist or full", clip(string(in.Security)))
	}
	switch in.Ask {
	case "", AskOff, AskOnMiss, AskAlways:
	default:
		return invalidf("ask %q: want off, on-miss or always", clip(string(in.Ask)))
	}
	switch in.Host {
	case "", HostSandbox, HostWorker:
	default:
		return invalidf("host %q: want sandbox or worker", clip(string(in.Host)))
	}
	if in.Pty {
		return invalidf("pty is not supported")
	}
	if in.Node != "" {
		return invalidf("node is not supported: toolq workers take exec jobs from the queue")
	}
	return nil
}

// validateEnvShape checks names and sizes. Which names are refused for
// execution is policy (see EnvRefusal), decided by Evaluate.
func validateEnvShape(env map[string]string) error {
	if len(env) > MaxEnvEntries {
		return invalidf("env has %d entries, more than %d", len(env), MaxEnvEntries)
	}
	total := 0
	for k, v := range env {
		if !validEnvName(k) {
			return invalidf("env name %q is not a valid name: want [A-Za-z_][A-Za-z0-9_]*", clip(k))
		}
		if strings.IndexByte(v, 0) >= 0 {
			return invalidf("env %s contains a NUL byte", k)
		}
		total += len(k) + len(v) + 2
	}
	if total > MaxEnvBytes {
		return invalidf("env is %d bytes, more than %d", total, MaxEnvBytes)
	}
	return nil
}

func validEnvName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// EnvRefusal returns why an environment override named name is refused for
// execution, or "" when it is accepted. PATH in any case and loader
// variables (LD_*, DYLD_*) are refused, as are variables that make the shell
// or libc load code (BASH_ENV, ENV, SHELLOPTS, GCONV_PATH, …).
func EnvRefusal(name string) string {
	u := strings.ToUpper(name)
	switch {
	case u == "PATH":
		return "env.PATH overrides are refused: commands resolve through the worker's fixed PATH"
	case strings.HasPrefix(u, "LD_"), strings.HasPrefix(u, "DYLD_"):
		return fmt.Sprintf("env.%s: loader overrides (LD_*, DYLD_*) are refused", name)
	}
	switch u {
	case "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH",
		"GLOBIGNORE", "BASH_XTRACEFD", "EXECIGNORE", "GCONV_PATH", "LOCPATH", "HOSTALIASES",
		"MALLOC_CONF", "GLIBC_TUNABLES", "SHELL", "HOME":
		return fmt.Sprintf("env.%s overrides are refused: they change what the shell or libc loads or runs", name)
	}
	if strings.HasPrefix(u, "BASH_FUNC_") {
		return fmt.Sprintf("env.%s: exported shell functions are refused", name)
	}
	return ""
}

func invalidf(format string, args ...any) *contracts.Error {
	return contracts.Errorf(contracts.CodeInvalidInput, format, args...)
}

func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
