package shell

import (
	"fmt"
	"sort"
	"strings"

	"github.com/toolq/toolq/contracts"
)

// DefaultEnvAllow are the environment variables any job may set. Each
// only selects data (a locale, a time zone, a terminal description) or
// output style; none names a program, a library, a config file or options
// that a common program reads. Policy.EnvAllow adds to them.
var DefaultEnvAllow = []string{
	"LANG", "LANGUAGE", "LC_*", "TZ",
	"TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "COLUMNS", "LINES",
	"CI",
}

// CheckEnv reports whether a job may set the environment overrides env
// under p. It returns nil, or a *contracts.Error with code denied that
// names the first refused variable (in name order) and how an operator can
// allow it. Names that EnvRefusal refuses stay refused even when
// Policy.EnvAllow lists them.
func (p *Policy) CheckEnv(env map[string]string) error {
	if why := p.envRefusal(env); why != "" {
		return contracts.Errorf(contracts.CodeDenied, "%s", why)
	}
	return nil
}

// envRefusal is CheckEnv's reason, or "".
func (p *Policy) envRefusal(env map[string]string) string {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !validEnvName(k) {
			return fmt.Sprintf("env name %q is not valid", clip(k))
		}
		if why := EnvRefusal(k); why != "" {
			return why + " (whatever envAllow says)"
		}
		if !p.envAllowed(k) {
			return fmt.Sprintf("env.%s is not on the exec policy's env allowlist (%s, and envAllow); "+
				"an operator can allow it by adding %q to envAllow in the worker's exec policy",
				k, strings.Join(DefaultEnvAllow, ", "), k)
		}
	}
	return ""
}

// envAllowed reports whether name matches DefaultEnvAllow or p.EnvAllow. It
// does not look at EnvRefusal.
func (p *Policy) envAllowed(name string) bool {
	for _, list := range [][]string{DefaultEnvAllow, p.EnvAllow} {
		for _, pat := range list {
			if envMatch(pat, name) {
				return true
			}
		}
	}
	return false
}

// envMatch matches a variable name against an allowlist entry: an exact
// name, a prefix followed by "*", or "*" alone. Matching is case-sensitive.
func envMatch(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

// validEnvPattern checks one Policy.EnvAllow entry.
func validEnvPattern(pat string) error {
	prefix, wild := strings.CutSuffix(pat, "*")
	switch {
	case pat == "*":
		return nil
	case !validEnvName(prefix):
		return fmt.Errorf("want a variable name, a name prefix followed by *, or *")
	case !wild && EnvRefusal(pat) != "":
		return fmt.Errorf("%s is always refused", pat)
	case wild && EnvRefusal(prefix+"X") != "":
		return fmt.Errorf("every name it matches is always refused")
	}
	return nil
}
