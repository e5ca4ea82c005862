package contracts

import "strings"

// MaxIDLength is the longest id accepted for anything that becomes a subject token.
const MaxIDLength = 128

// ValidID reports whether s matches [A-Za-z0-9_-]{1,128}, the rule for every
// id that becomes a NATS subject token (session, job, run, approval, call).
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !idByte(s[i]) {
			return false
		}
	}
	return true
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// ValidateID returns an invalid_input error naming what (for example
// "session") when s is not a valid id.
func ValidateID(what, s string) error {
	if ValidID(s) {
		return nil
	}
	if s == "" {
		return Errorf(CodeInvalidInput, "%s is required", what)
	}
	return Errorf(CodeInvalidInput, "%s %q is not a valid id: want [A-Za-z0-9_-]{1,%d}", what, clip(s, 64), MaxIDLength)
}

// ValidTool reports whether s is a valid tool name: one or more id tokens
// joined by dots ("noop", "code_mode.exec"), at most 128 bytes in all.
func ValidTool(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLength {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			if !idByte(tok[i]) {
				return false
			}
		}
	}
	return true
}

// ValidateTool returns an invalid_input error when s is not a valid tool name.
func ValidateTool(s string) error {
	if ValidTool(s) {
		return nil
	}
	if s == "" {
		return Errorf(CodeInvalidInput, "tool is required")
	}
	return Errorf(CodeInvalidInput, "tool %q is not a valid tool name: want dot-separated [A-Za-z0-9_-] tokens, at most %d bytes", clip(s, 64), MaxIDLength)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
