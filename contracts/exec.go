package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// ExecHost says where an exec command runs.
type ExecHost string

// Exec hosts.
const (
	// ExecHostSandbox runs the command under bubblewrap on the worker:
	// read-only system, a private writable workdir, no network. The default.
	ExecHostSandbox ExecHost = "sandbox"
	// ExecHostWorker runs the command directly on the worker host; only when
	// the worker's policy allows it.
	ExecHostWorker ExecHost = "worker"
)

// ExecSecurity is the enforcement mode of exec.
type ExecSecurity string

// Exec security modes, from strictest to loosest.
const (
	// ExecSecurityDeny refuses every command.
	ExecSecurityDeny ExecSecurity = "deny"
	// ExecSecurityAllowlist runs a command only when every segment resolves
	// to an allowlisted binary or a safe bin.
	ExecSecurityAllowlist ExecSecurity = "allowlist"
	// ExecSecurityFull runs anything (environment and host checks still apply).
	ExecSecurityFull ExecSecurity = "full"
)

// ExecAsk says when a person is asked to approve a command.
type ExecAsk string

// Exec ask modes, from loosest to strictest.
const (
	// ExecAskOff never asks: an allowlist miss is denied.
	ExecAskOff ExecAsk = "off"
	// ExecAskOnMiss asks for an allowlist miss. The default.
	ExecAskOnMiss ExecAsk = "on-miss"
	// ExecAskAlways asks for every command.
	ExecAskAlways ExecAsk = "always"
)

// Defaults and limits of the exec job (the exec contract).
const (
	// ExecDefaultTimeoutSeconds is the timeout of a job that sets none.
	ExecDefaultTimeoutSeconds = 1800
	// ExecMaxTimeoutSeconds is the longest timeout a job may ask for.
	ExecMaxTimeoutSeconds = int(MaxJobTimeout / time.Second)
	// ExecDefaultYieldMs is the delay after which a foreground command is
	// moved to the background.
	ExecDefaultYieldMs = 10000
	// ExecMaxCommandBytes bounds the command text.
	ExecMaxCommandBytes = 64 << 10
	// ExecMaxEnvEntries bounds the number of environment overrides.
	ExecMaxEnvEntries = 64
	// ExecMaxEnvBytes bounds the total size of the environment overrides.
	ExecMaxEnvBytes = 64 << 10
	// ExecMaxInputBytes bounds the encoded job input.
	ExecMaxInputBytes = 256 << 10
)

// ExecInput is the input of an exec job. Security and Ask, when set, can
// only make the worker's policy stricter; empty means "as the worker says".
type ExecInput struct {
	// Command is the shell text to run. Required.
	Command string `json:"command"`
	// Workdir is an absolute directory inside one of the policy's workdir
	// roots; empty means the policy's default, or a private scratch
	// directory when it has none.
	Workdir string `json:"workdir,omitempty"`
	// Env holds environment overrides. PATH (any case), LD_* and DYLD_* and
	// other loader or shell-startup variables are refused.
	Env map[string]string `json:"env,omitempty"`
	// Timeout in seconds; 0 means ExecDefaultTimeoutSeconds.
	Timeout int `json:"timeout,omitempty"`
	// Security may only tighten the worker's mode.
	Security ExecSecurity `json:"security,omitempty"`
	// Ask may only tighten the worker's mode.
	Ask ExecAsk `json:"ask,omitempty"`
	// Host is sandbox (default) or worker.
	Host ExecHost `json:"host,omitempty"`
	// Background returns at once with an ExecBackgroundResult; the command
	// runs on as a session (see ExecSessionID).
	Background bool `json:"background,omitempty"`
	// YieldMs moves a foreground command to the background after this delay;
	// nil means ExecDefaultYieldMs.
	YieldMs *int `json:"yieldMs,omitempty"`
	// Elevated asks for elevated mode. toolq has none: a job asking for it is
	// denied rather than silently run unelevated.
	Elevated bool `json:"elevated,omitempty"`
	// Pty and Node are seed fields toolq does not support; setting them is
	// invalid_input.
	Pty  bool   `json:"pty,omitempty"`
	Node string `json:"node,omitempty"`
}

// DecodeExecInput decodes and validates an exec job's input strictly
// (unknown fields are refused) and applies the defaults. Its errors are
// *Error with code invalid_input.
func DecodeExecInput(data []byte) (*ExecInput, error) {
	if len(data) > ExecMaxInputBytes {
		return nil, Errorf(CodeInvalidInput, "input is %d bytes, more than %d", len(data), ExecMaxInputBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil, Errorf(CodeInvalidInput, "input is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var in ExecInput
	if err := dec.Decode(&in); err != nil {
		return nil, Errorf(CodeInvalidInput, "input: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, Errorf(CodeInvalidInput, "input: trailing data after the JSON object")
	}
	in.ApplyDefaults()
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return &in, nil
}

// ApplyDefaults fills the contract's defaults: host sandbox, timeout 1800 s,
// yieldMs 10000.
func (in *ExecInput) ApplyDefaults() {
	if in.Host == "" {
		in.Host = ExecHostSandbox
	}
	if in.Timeout == 0 {
		in.Timeout = ExecDefaultTimeoutSeconds
	}
	if in.YieldMs == nil {
		y := ExecDefaultYieldMs
		in.YieldMs = &y
	}
}

// TimeoutDuration returns the job's timeout, with the default applied.
func (in *ExecInput) TimeoutDuration() time.Duration {
	if in.Timeout <= 0 {
		return ExecDefaultTimeoutSeconds * time.Second
	}
	return time.Duration(in.Timeout) * time.Second
}

// Validate checks the input's shape. It does not apply policy: a command
// the worker's policy refuses is denied, not invalid. Its errors are *Error
// with code invalid_input.
func (in *ExecInput) Validate() error {
	if strings.TrimSpace(in.Command) == "" {
		return Errorf(CodeInvalidInput, "command is required")
	}
	if len(in.Command) > ExecMaxCommandBytes {
		return Errorf(CodeInvalidInput, "command is %d bytes, more than %d", len(in.Command), ExecMaxCommandBytes)
	}
	if strings.IndexByte(in.Command, 0) >= 0 {
		return Errorf(CodeInvalidInput, "command contains a NUL byte")
	}
	if in.Workdir != "" {
		if strings.IndexByte(in.Workdir, 0) >= 0 || !filepath.IsAbs(in.Workdir) {
			return Errorf(CodeInvalidInput, "workdir %q must be an absolute path", clip(in.Workdir, 64))
		}
	}
	if err := validateEnvShape(in.Env); err != nil {
		return err
	}
	if in.Timeout < 0 || in.Timeout > ExecMaxTimeoutSeconds {
		return Errorf(CodeInvalidInput, "timeout %d s is out of range [1, %d]", in.Timeout, ExecMaxTimeoutSeconds)
	}
	if in.YieldMs != nil && *in.YieldMs < 0 {
		return Errorf(CodeInvalidInput, "yieldMs must not be negative")
	}
	switch in.Security {
	case "", ExecSecurityDeny, ExecSecurityAllowlist, ExecSecurityFull:
	default:
		return Errorf(CodeInvalidInput, "security %q: want deny, allowlist or full", clip(string(in.Security), 64))
	}
	switch in.Ask {
	case "", ExecAskOff, ExecAskOnMiss, ExecAskAlways:
	default:
		return Errorf(CodeInvalidInput, "ask %q: want off, on-miss or always", clip(string(in.Ask), 64))
	}
	switch in.Host {
	case "", ExecHostSandbox, ExecHostWorker:
	default:
		return Errorf(CodeInvalidInput, "host %q: want sandbox or worker", clip(string(in.Host), 64))
	}
	if in.Pty {
		return Errorf(CodeInvalidInput, "pty is not supported")
	}
	if in.Node != "" {
		return Errorf(CodeInvalidInput, "node is not supported: toolq workers take exec jobs from the queue")
	}
	return nil
}

// validateEnvShape checks names and sizes. Which names are refused for
// execution is the worker's policy.
func validateEnvShape(env map[string]string) error {
	if len(env) > ExecMaxEnvEntries {
		return Errorf(CodeInvalidInput, "env has %d entries, more than %d", len(env), ExecMaxEnvEntries)
	}
	total := 0
	for k, v := range env {
		if !ValidEnvName(k) {
			return Errorf(CodeInvalidInput, "env name %q is not a valid name: want [A-Za-z_][A-Za-z0-9_]*", clip(k, 64))
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Errorf(CodeInvalidInput, "env %s contains a NUL byte", k)
		}
		total += len(k) + len(v) + 2
	}
	if total > ExecMaxEnvBytes {
		return Errorf(CodeInvalidInput, "env is %d bytes, more than %d", total, ExecMaxEnvBytes)
	}
	return nil
}

// ValidEnvName reports whether s is a name exec accepts in ExecInput.Env:
// [A-Za-z_][A-Za-z0-9_]*, at most 256 bytes.
func ValidEnvName(s string) bool {
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
