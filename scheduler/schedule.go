package scheduler

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nuid"
	"github.com/robfig/cron/v3"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
)

// Limits on schedules.
const (
	// MaxIDLength is the longest schedule id: the job id of a firing is the
	// schedule id, "-" and the fire time in Unix seconds, and must stay a
	// valid id (at most 128 bytes).
	MaxIDLength = 100
	// MinEvery is the shortest interval of a periodic schedule.
	MinEvery = time.Second
	// MaxMetaEntries is the most meta entries a schedule's job may carry; a
	// firing adds two (MetaScheduleID, MetaFireTime).
	MaxMetaEntries = 30
)

// Meta keys every fired job carries.
const (
	MetaScheduleID = "schedule_id"
	MetaFireTime   = "fire_time"
)

// Kind says how a schedule fires.
type Kind string

// Kinds of schedule.
const (
	// KindAt fires once, at Schedule.At.
	KindAt Kind = "at"
	// KindEvery fires every Schedule.Every, counted from Schedule.Anchor.
	KindEvery Kind = "every"
	// KindCron fires on the times of a cron expression in a time zone.
	KindCron Kind = "cron"
)

// Schedule submits a job later (At, In) or periodically (Every, Cron). Set
// exactly one of At, In, Every and Cron; Create fills in the rest.
type Schedule struct {
	// ID identifies the schedule ([A-Za-z0-9_-], at most MaxIDLength bytes);
	// random when empty.
	ID string
	// At fires the job once at this time. It is rounded up to a whole second
	// (asynq scores and NATS @at times are whole seconds) and must lie in the
	// future.
	At time.Time
	// In fires the job once after this delay; Create turns it into At.
	In time.Duration
	// Every fires the job periodically; whole seconds, at least MinEvery.
	Every time.Duration
	// Cron fires the job on the times of a standard five-field cron
	// expression (minute hour day-of-month month day-of-week) or a descriptor
	// (@hourly, @daily, @weekly, @monthly, @yearly).
	Cron string
	// TimeZone is the IANA time zone of Cron ("Europe/Berlin"); UTC when empty.
	TimeZone string
	// Job is what each firing submits.
	Job Job
	// CreatedAt is set by Create.
	CreatedAt time.Time
	// Anchor is set by Create for Every schedules: they fire at
	// Anchor + k*Every, k ≥ 1.
	Anchor time.Time
}

// Job is the template of the job a schedule submits. Each firing becomes a
// job with id "<schedule id>-<fire time in Unix seconds>", which is also its
// Nats-Msg-Id, so a firing is enqueued once however many schedulers run.
type Job struct {
	Tool        string            `json:"tool"`
	Session     string            `json:"session,omitempty"`
	Input       json.RawMessage   `json:"input,omitempty"`
	TimeoutMs   int64             `json:"timeout_ms,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	Progress    bool              `json:"progress,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
}

// Kind reports how s fires, or "" when s sets none (or several) of At, In,
// Every and Cron.
func (s *Schedule) Kind() Kind {
	var k Kind
	n := 0
	if !s.At.IsZero() || s.In != 0 {
		k, n = KindAt, n+1
		if !s.At.IsZero() && s.In != 0 {
			n++
		}
	}
	if s.Every != 0 {
		k, n = KindEvery, n+1
	}
	if s.Cron != "" {
		k, n = KindCron, n+1
	}
	if n != 1 {
		return ""
	}
	return k
}

// Spec is a short human form of when s fires: "@at 2026-…Z", "@every 10s",
// "0 2 * * * (Europe/Berlin)".
func (s *Schedule) Spec() string {
	switch s.Kind() {
	case KindAt:
		return "@at " + s.At.UTC().Format(time.RFC3339)
	case KindEvery:
		return "@every " + s.Every.String()
	case KindCron:
		return s.Cron + " (" + s.zone() + ")"
	}
	return ""
}

func (s *Schedule) zone() string {
	if s.TimeZone == "" {
		return "UTC"
	}
	return s.TimeZone
}

// JobID is the id of the job fired at t.
func (s *Schedule) JobID(t time.Time) string {
	return s.ID + "-" + strconv.FormatInt(t.Unix(), 10)
}

// prepare validates s and fills in ID, At (from In), CreatedAt and Anchor.
// Every failure is a *contracts.Error with code invalid_input.
func (s *Schedule) prepare(now time.Time) error {
	now = now.UTC()
	if s.ID == "" {
		s.ID = nuid.Next()
	}
	if err := contracts.ValidateID("schedule id", s.ID); err != nil {
		return err
	}
	if len(s.ID) > MaxIDLength {
		return contracts.Errorf(contracts.CodeInvalidInput, "schedule id is %d bytes, at most %d allowed", len(s.ID), MaxIDLength)
	}
	kind := s.Kind()
	if kind == "" {
		return contracts.Errorf(contracts.CodeInvalidInput, "a schedule needs exactly one of at, in, every and cron")
	}
	if s.TimeZone != "" && kind != KindCron {
		return contracts.Errorf(contracts.CodeInvalidInput, "a time zone applies to cron schedules only")
	}
	switch kind {
	case KindAt:
		if s.In != 0 {
			if s.In < 0 {
				return contracts.Errorf(contracts.CodeInvalidInput, "in %s is negative", s.In)
			}
			s.At = now.Add(s.In)
			s.In = 0
		}
		s.At = ceilSecond(s.At.UTC())
		if !s.At.After(now) {
			return contracts.Errorf(contracts.CodeInvalidInput, "at %s is not in the future", s.At.Format(time.RFC3339))
		}
	case KindEvery:
		if s.Every < MinEvery {
			return contracts.Errorf(contracts.CodeInvalidInput, "every %s is shorter than %s", s.Every, MinEvery)
		}
		if s.Every%time.Second != 0 {
			return contracts.Errorf(contracts.CodeInvalidInput, "every %s is not a whole number of seconds", s.Every)
		}
		if s.Anchor.IsZero() {
			// Rounded like the NATS server rounds the store time of an
			// @every schedule message, so both count from the same second.
			s.Anchor = now.Round(time.Second)
		}
	case KindCron:
		sched, err := parseCron(s.Cron, s.TimeZone)
		if err != nil {
			return err
		}
		if sched.Next(now).IsZero() {
			return contracts.Errorf(contracts.CodeInvalidInput, "cron %q never fires", s.Cron)
		}
	}
	if err := s.Job.validate(); err != nil {
		return err
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = now
	}
	return nil
}

func (j *Job) validate() error {
	if j.Session == "" {
		j.Session = producer.DefaultSession
	}
	if len(j.Meta) > MaxMetaEntries {
		return contracts.Errorf(contracts.CodeInvalidInput, "meta has %d entries, at most %d allowed in a schedule", len(j.Meta), MaxMetaEntries)
	}
	if len(j.Input) > 0 && !json.Valid(j.Input) {
		return contracts.Errorf(contracts.CodeInvalidInput, "input is not valid JSON")
	}
	// The job a firing builds must pass the contract's checks.
	probe := j.build(strings.Repeat("x", MaxIDLength), time.Unix(1<<33, 0))
	return probe.Validate()
}

// build returns the job of the firing at t of schedule id.
func (j *Job) build(id string, t time.Time) *contracts.Job {
	meta := make(map[string]string, len(j.Meta)+2)
	for k, v := range j.Meta {
		meta[k] = v
	}
	meta[MetaScheduleID] = id
	meta[MetaFireTime] = t.UTC().Format(time.RFC3339)
	return &contracts.Job{
		ID:          id + "-" + strconv.FormatInt(t.Unix(), 10),
		Tool:        j.Tool,
		Session:     j.Session,
		Input:       j.Input,
		TimeoutMs:   j.TimeoutMs,
		MaxAttempts: j.MaxAttempts,
		Progress:    j.Progress,
		Meta:        meta,
		CreatedAt:   time.Now().UTC(),
	}
}

// parseCron parses a five-field expression or descriptor in zone tz with
// robfig/cron's standard parser, the parser of asynq's Scheduler.
func parseCron(spec, tz string) (cron.Schedule, error) {
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "":
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "cron expression is empty")
	case strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ="):
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "cron %q: give the time zone separately, not in the expression", spec)
	case strings.HasPrefix(spec, "@every"):
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "cron %q: use an every schedule for intervals", spec)
	case !strings.HasPrefix(spec, "@") && len(strings.Fields(spec)) != 5:
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "cron %q: want five fields (minute hour day-of-month month day-of-week)", spec)
	}
	if tz == "" {
		tz = "UTC"
	}
	if _, err := time.LoadLocation(tz); err != nil || strings.ContainsAny(tz, " \t") {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "unknown time zone %q", tz)
	}
	sched, err := cron.ParseStandard("CRON_TZ=" + tz + " " + spec)
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "cron %q: %v", spec, err)
	}
	return sched, nil
}

// natsPattern is the Nats-Schedule header of s: the server's cron has a
// seconds field first.
func (s *Schedule) natsPattern() string {
	switch s.Kind() {
	case KindAt:
		return "@at " + s.At.UTC().Format(time.RFC3339)
	case KindEvery:
		return "@every " + s.Every.String()
	case KindCron:
		c := strings.TrimSpace(s.Cron)
		if strings.HasPrefix(c, "@") {
			return c
		}
		return "0 " + strings.Join(strings.Fields(c), " ")
	}
	return ""
}

// asynqSpec is the cronspec of a periodic schedule for asynq's Scheduler.
func (s *Schedule) asynqSpec() string {
	switch s.Kind() {
	case KindEvery:
		return "@every " + s.Every.String()
	case KindCron:
		return "CRON_TZ=" + s.zone() + " " + strings.TrimSpace(s.Cron)
	}
	return ""
}

// Next returns the first fire time after t, or the zero time when there is none.
func (s *Schedule) Next(t time.Time) time.Time {
	switch s.Kind() {
	case KindAt:
		if s.At.After(t) {
			return s.At
		}
	case KindEvery:
		if t.Before(s.Anchor) {
			return s.Anchor.Add(s.Every)
		}
		k := t.Sub(s.Anchor)/s.Every + 1
		return s.Anchor.Add(k * s.Every)
	case KindCron:
		sched, err := parseCron(s.Cron, s.TimeZone)
		if err != nil {
			return time.Time{}
		}
		return sched.Next(t).UTC()
	}
	return time.Time{}
}

// Latest returns the last fire time at or before t (and after the
// schedule's creation), or the zero time when there is none.
func (s *Schedule) Latest(t time.Time) time.Time {
	switch s.Kind() {
	case KindAt:
		if !s.At.After(t) {
			return s.At
		}
	case KindEvery:
		k := t.Sub(s.Anchor) / s.Every
		if k >= 1 {
			return s.Anchor.Add(k * s.Every)
		}
	case KindCron:
		sched, err := parseCron(s.Cron, s.TimeZone)
		if err != nil {
			return time.Time{}
		}
		// robfig/cron only looks forward: step from ever earlier starts
		// until a window holds a fire time, then walk to the last one.
		for _, w := range []time.Duration{time.Minute + time.Second, time.Hour, 25 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 5 * 367 * 24 * time.Hour} {
			start := t.Add(-w)
			if start.Before(s.CreatedAt) {
				start = s.CreatedAt
			}
			c := sched.Next(start)
			if c.IsZero() || c.After(t) {
				if !start.After(s.CreatedAt) {
					return time.Time{}
				}
				continue
			}
			for n := sched.Next(c); !n.IsZero() && !n.After(t); n = sched.Next(n) {
				c = n
			}
			return c.UTC()
		}
	}
	return time.Time{}
}

func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// wire is the stored form of a Schedule.
type wire struct {
	ID        string    `json:"id"`
	Kind      Kind      `json:"kind"`
	At        time.Time `json:"at,omitzero"`
	Every     string    `json:"every,omitempty"`
	Cron      string    `json:"cron,omitempty"`
	TimeZone  string    `json:"tz,omitempty"`
	Anchor    time.Time `json:"anchor,omitzero"`
	Job       Job       `json:"job"`
	CreatedAt time.Time `json:"created_at"`
}

// MarshalJSON writes Every as a duration string ("10s") and adds the kind.
func (s Schedule) MarshalJSON() ([]byte, error) {
	w := wire{
		ID: s.ID, Kind: s.Kind(), At: s.At, Cron: s.Cron, TimeZone: s.TimeZone,
		Anchor: s.Anchor, Job: s.Job, CreatedAt: s.CreatedAt,
	}
	if s.Every != 0 {
		w.Every = s.Every.String()
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Schedule) UnmarshalJSON(data []byte) error {
	var w wire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*s = Schedule{ID: w.ID, At: w.At, Cron: w.Cron, TimeZone: w.TimeZone, Anchor: w.Anchor, Job: w.Job, CreatedAt: w.CreatedAt}
	if w.Every != "" {
		d, err := time.ParseDuration(w.Every)
		if err != nil {
			return fmt.Errorf("every: %w", err)
		}
		s.Every = d
	}
	return nil
}
