package shell

import (
	"fmt"
	"strings"

	"github.com/toolq/toolq/contracts"
)

// Host says where a command runs.
type Host = contracts.ExecHost

// Hosts.
const (
	// HostSandbox runs the command under bubblewrap on the worker: read-only
	// system, a private writable workdir, no network. The default.
	HostSandbox = contracts.ExecHostSandbox
	// HostWorker runs the command directly on the worker host; only when the
	// worker's policy allows it.
	HostWorker = contracts.ExecHostWorker
)

// Security is the enforcement mode.
type Security = contracts.ExecSecurity

// Security modes, from strictest to loosest.
const (
	// SecurityDeny refuses every command.
	SecurityDeny = contracts.ExecSecurityDeny
	// SecurityAllowlist runs a command only when every segment resolves to an
	// allowlisted binary or a safe bin.
	SecurityAllowlist = contracts.ExecSecurityAllowlist
	// SecurityFull runs anything (environment and host checks still apply).
	SecurityFull = contracts.ExecSecurityFull
)

// Ask says when a person is asked to approve a command.
type Ask = contracts.ExecAsk

// Ask modes, from loosest to strictest.
const (
	// AskOff never asks: an allowlist miss is denied.
	AskOff = contracts.ExecAskOff
	// AskOnMiss asks for an allowlist miss. The default.
	AskOnMiss = contracts.ExecAskOnMiss
	// AskAlways asks for every command.
	AskAlways = contracts.ExecAskAlways
)

// Defaults and limits of the exec job (the exec contract).
const (
	// DefaultTimeoutSeconds is the timeout of a job that sets none.
	DefaultTimeoutSeconds = contracts.ExecDefaultTimeoutSeconds
	// MaxTimeoutSeconds is the longest timeout a job may ask for.
	MaxTimeoutSeconds = contracts.ExecMaxTimeoutSeconds
	// DefaultYieldMs is the delay after which a foreground command would be
	// moved to the background.
	DefaultYieldMs = contracts.ExecDefaultYieldMs
	// MaxCommandBytes bounds the command text.
	MaxCommandBytes = contracts.ExecMaxCommandBytes
	// MaxEnvEntries bounds the number of environment overrides.
	MaxEnvEntries = contracts.ExecMaxEnvEntries
	// MaxEnvBytes bounds the total size of the environment overrides.
	MaxEnvBytes = contracts.ExecMaxEnvBytes
	// MaxInputBytes bounds the encoded job input.
	MaxInputBytes = contracts.ExecMaxInputBytes
)

// Input is the argument of an exec job (contracts.ExecInput). Security and
// Ask, when set, can only make the worker's policy stricter (see
// Effective); empty means "as the worker says". Its Validate checks the
// shape only: a command the policy refuses is a Decision, not a validation
// error.
type Input = contracts.ExecInput

// DecodeInput decodes and validates a job's input strictly (unknown fields
// are refused) and applies the defaults. Its errors are *contracts.Error with
// code invalid_input.
func DecodeInput(data []byte) (*Input, error) { return contracts.DecodeExecInput(data) }

func validEnvName(s string) bool { return contracts.ValidEnvName(s) }

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
