package contracts

import "strings"

// Priority is a job's priority level. It is not in the job's body: it is
// the subject the job is published on, so each level is a consumer of its
// own that workers pull from in order (high before normal before low, with
// a minimum share for the lower levels; docs/RATIONALE.md, "Flow control").
type Priority string

// The priority levels. Normal is the plain job subject, so every producer
// and every deployment made before priorities submit at normal.
const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// Priorities lists the levels, highest first.
var Priorities = []Priority{PriorityHigh, PriorityNormal, PriorityLow}

// priorityMark opens the subject token of a level other than normal,
// <prefix>.jobs.~high.<tool>. No tool token contains it (ValidTool), so a
// level's subject is never another tool's.
const priorityMark = "~"

// ParsePriority reads a level; "" is normal. Its error is invalid_input.
func ParsePriority(s string) (Priority, error) {
	switch p := Priority(s); p {
	case "", PriorityNormal:
		return PriorityNormal, nil
	case PriorityHigh, PriorityLow:
		return p, nil
	}
	return "", Errorf(CodeInvalidInput, "priority %q is not one of high, normal, low", clip(s, 32))
}

// Rank orders levels: 0 for high, 1 for normal, 2 for low.
func (p Priority) Rank() int {
	switch p {
	case PriorityHigh:
		return 0
	case PriorityLow:
		return 2
	default:
		return 1
	}
}

func (p Priority) token() string {
	if p == PriorityHigh || p == PriorityLow {
		return priorityMark + string(p) + "."
	}
	return ""
}

// JobAt is the subject of a job for tool at level p: Job(tool) at normal,
// <prefix>.jobs.~<level>.<tool> otherwise.
func (s Subjects) JobAt(tool string, p Priority) string { return s.TenantJobAt("", tool, p) }

// TenantJobAt is TenantJob at level p.
func (s Subjects) TenantJobAt(tenant, tool string, p Priority) string {
	return s.tenant(tenant) + ".jobs." + p.token() + tool
}

// ConsumerNameAt is the durable consumer of tool's jobs at level p:
// ConsumerName(tool) at normal (the name autoscalers and operators know),
// with "~<level>" appended otherwise.
func (s Subjects) ConsumerNameAt(tool string, p Priority) string {
	if t := p.token(); t != "" {
		return s.ConsumerName(tool) + priorityMark + string(p)
	}
	return s.ConsumerName(tool)
}

// TenantJobOf returns the tool and level of a job subject of tenant in the
// toolq account, tool "" when subject is not one.
func (s Subjects) TenantJobOf(tenant, subject string) (string, Priority) {
	tool, p, _ := s.TenantJobLaneOf(tenant, subject)
	return tool, p
}

// TenantJobLaneOf is TenantJobOf with the subject's lane (0 for the plain
// subject of a level).
func (s Subjects) TenantJobLaneOf(tenant, subject string) (string, Priority, int) {
	rest, ok := strings.CutPrefix(subject, s.tenant(tenant)+".jobs.")
	if !ok {
		return "", "", 0
	}
	p := PriorityNormal
	if mark, tool, found := strings.Cut(rest, "."); found && strings.HasPrefix(mark, priorityMark) && !strings.HasPrefix(mark, laneMark) {
		lvl := Priority(mark[len(priorityMark):])
		if lvl != PriorityHigh && lvl != PriorityLow {
			return "", "", 0
		}
		p, rest = lvl, tool
	}
	lane := 0
	if mark, tool, found := strings.Cut(rest, "."); found && strings.HasPrefix(mark, laneMark) {
		l, ok := parseLane(mark)
		if !ok {
			return "", "", 0
		}
		lane, rest = l, tool
	}
	if !ValidTool(rest) {
		return "", "", 0
	}
	return rest, p, lane
}
