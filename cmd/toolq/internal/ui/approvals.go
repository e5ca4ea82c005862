package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
)

// maxApprovals bounds the approvals page.
const maxApprovals = 200

// approvalRow is one approval record with what its page needs.
type approvalRow struct {
	Rec *contracts.ExecApprovalRecord
	// EnvKeys are the plan's env names, sorted.
	EnvKeys []string
	// HashOK says the plan hashes to the hash the record carries (nothing
	// is offered for signing otherwise).
	HashOK bool
	// Always is what approving "always" adds to the shared allowlist, as
	// `toolq approve --always` prints it (computed without the worker's
	// policy); offered only for the default tenant's approvals that add
	// something.
	Always shell.Always
}

// approvalsData is the approvals page.
type approvalsData struct {
	Rows     []approvalRow
	SeedHint string
}

func (s *Server) approvals(ctx context.Context, f filter) ([]approvalRow, error) {
	kv, err := s.js.KeyValue(ctx, s.cfg.Subjects.ApprovalsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("approvals bucket: %w", err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	defer func() { _ = keys.Stop() }()
	var out []approvalRow
	for k := range keys.Keys() {
		tenant, _, found := strings.Cut(k, ".")
		if !found {
			tenant = ""
		}
		if !f.tenantMatch(tenant) {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // expired meanwhile
		}
		var rec contracts.ExecApprovalRecord
		if json.Unmarshal(e.Value(), &rec) != nil || rec.Approval.Tenant != tenant {
			continue
		}
		if f.Session != "" && rec.Approval.Session != f.Session {
			continue
		}
		row := approvalRow{Rec: &rec, HashOK: rec.Approval.Plan.Hash() == rec.Approval.Hash}
		if row.HashOK && tenant == "" {
			row.Always = shell.AlwaysEntries(shell.Policy{}, &rec.Approval.Plan)
		}
		for name := range rec.Approval.Plan.Env {
			row.EnvKeys = append(row.EnvKeys, name)
		}
		sort.Strings(row.EnvKeys)
		out = append(out, row)
		if len(out) >= maxApprovals {
			break
		}
	}
	// Pending first, then the newest.
	sort.Slice(out, func(i, j int) bool {
		pi, pj := out[i].Rec.Status == contracts.ExecApprovalPending, out[j].Rec.Status == contracts.ExecApprovalPending
		if pi != pj {
			return pi
		}
		return out[i].Rec.Approval.CreatedAt.After(out[j].Rec.Approval.CreatedAt)
	})
	return out, nil
}

func (s *Server) handleApprovals(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Approvals"}
	f, err := parseFilter(r)
	if err != nil {
		s.fail(w, r, "approvals", p, err)
		return
	}
	p.Filter = f
	p.Live = filter{Tenant: f.Tenant, Session: f.Session, Tool: contracts.ToolExec}.liveURL("kind", "job")
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	p.Tenants = s.tenants(ctx)
	rows, err := s.approvals(ctx, f)
	p.Data = &approvalsData{Rows: rows, SeedHint: s.cfg.SeedHint}
	if err != nil {
		s.fail(w, r, "approvals", p, err)
		return
	}
	s.render(w, r, "approvals", p)
}

// decideReply is the decide endpoint's answer to the page.
type decideReply struct {
	OK      bool             `json:"ok"`
	Error   *contracts.Error `json:"error,omitempty"`
	Applied bool             `json:"applied,omitempty"`
	Status  string           `json:"status,omitempty"`
	JobID   string           `json:"jobId,omitempty"`
	Session string           `json:"session,omitempty"`
	// DecideJob is the exec.decide job that carried the decision.
	DecideJob string `json:"decideJob,omitempty"`
}

// handleDecide relays a decision the page signed with the operator's own
// approver key: the console holds no key and signs nothing. It checks the
// decision's shape and that it answers exactly the pending approval it
// names (the worker checks again, and alone decides whether the approver
// is trusted), submits it as an exec.decide job as `toolq approve` does,
// and reports the job's outcome.
func (s *Server) handleDecide(w http.ResponseWriter, r *http.Request) {
	reply := func(code int, rep *decideReply) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(rep)
	}
	refuse := func(code int, format string, args ...any) {
		reply(code, &decideReply{Error: contracts.Errorf(contracts.CodeInvalidInput, format, args...)})
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<10))
	if err != nil {
		refuse(http.StatusBadRequest, "read: %v", err)
		return
	}
	var in contracts.ExecDecideInput
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		refuse(http.StatusBadRequest, "decision: %v", err)
		return
	}
	d := &in.Decision
	if d.Tenant != "" && !contracts.ValidID(d.Tenant) {
		refuse(http.StatusBadRequest, "tenant %q is not a valid id", d.Tenant)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	rec, err := s.approval(ctx, d.Tenant, d.ApprovalID)
	if errors.Is(err, producer.ErrNoApproval) {
		refuse(http.StatusNotFound, "approval %s of tenant %s is unknown or expired", d.ApprovalID, orDefault(d.Tenant))
		return
	}
	if err != nil {
		refuse(http.StatusBadRequest, "%v", err)
		return
	}
	a := &rec.Approval
	switch {
	case rec.Status != contracts.ExecApprovalPending:
		refuse(http.StatusConflict, "approval %s is already %s", a.ID, rec.Status)
		return
	case a.Plan.Hash() != a.Hash:
		refuse(http.StatusConflict, "approval %s: its plan does not match its hash; not relayed", a.ID)
		return
	case d.Hash != a.Hash:
		refuse(http.StatusConflict, "the decision signs plan %s, the approval's plan is %s: reload the page", d.Hash, a.Hash)
		return
	case d.Always && d.Verdict != contracts.ExecApprove:
		refuse(http.StatusBadRequest, "always goes with approve only")
		return
	case d.Always && a.Tenant != "":
		// The allowlist is shared by every tenant's jobs: the worker
		// refuses a tenant's always (denied); say so before relaying.
		refuse(http.StatusBadRequest, "approval %s is tenant %s's: always changes the allowlist of every tenant and is for the default tenant's approvers only", a.ID, a.Tenant)
		return
	case d.Always && len(shell.AlwaysEntries(shell.Policy{}, &a.Plan).Entries) == 0:
		refuse(http.StatusBadRequest, "approving %s always would add nothing to the allowlist: approve it once", a.ID)
		return
	}
	// The signature must be the key's own over this decision: a decision
	// damaged on the way is refused here with a plain message. Whether the
	// key may decide is the worker's call alone.
	if err := shell.VerifyDecision(d, a, []string{d.Approver}, time.Now()); err != nil {
		refuse(http.StatusBadRequest, "the decision's signature does not verify: %v", err)
		return
	}
	job, got, err := s.relay(ctx, d)
	if job == nil {
		refuse(http.StatusBadGateway, "submit decision: %v", err)
		return
	}
	if err != nil {
		reply(http.StatusGatewayTimeout, &decideReply{DecideJob: job.ID, Error: contracts.Errorf(contracts.CodeTimeout, "waiting for decision %s: %v", job.ID, err)})
		return
	}
	if got.Data.Status == contracts.StatusFailed || got.Data.Status == contracts.StatusCancelled {
		e := got.Data.Error
		if e == nil {
			e = contracts.Errorf(contracts.CodeInternalError, "decision %s", got.Data.Status)
		}
		reply(http.StatusOK, &decideReply{DecideJob: job.ID, Error: e})
		return
	}
	var res contracts.ExecDecideResult
	if err := json.Unmarshal(got.Data.Result, &res); err != nil {
		reply(http.StatusOK, &decideReply{DecideJob: job.ID, Error: contracts.Errorf(contracts.CodeInternalError, "decision result: %v", err)})
		return
	}
	reply(http.StatusOK, &decideReply{OK: true, DecideJob: job.ID, Applied: res.Applied, Status: res.Status, JobID: res.JobID, Session: res.Session})
}

// approval reads approval id of tenant: the default tenant's through the
// producer, as `toolq approve` does, a named tenant's from its key
// <tenant>.<id> in the approvals bucket (ErrNoApproval when there is none).
func (s *Server) approval(ctx context.Context, tenant, id string) (*contracts.ExecApprovalRecord, error) {
	if tenant == "" {
		return s.p.Approval(ctx, id)
	}
	if err := contracts.ValidateID("approval id", id); err != nil {
		return nil, err
	}
	kv, err := s.js.KeyValue(ctx, s.cfg.Subjects.ApprovalsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: %s", producer.ErrNoApproval, id)
	}
	if err != nil {
		return nil, fmt.Errorf("approvals bucket: %w", err)
	}
	e, err := kv.Get(ctx, contracts.ExecApprovalKey(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", producer.ErrNoApproval, id)
	}
	if err != nil {
		return nil, fmt.Errorf("approval %s: %w", id, err)
	}
	var rec contracts.ExecApprovalRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("approval record %s: %w", id, err)
	}
	if rec.Approval.Tenant != tenant {
		return nil, fmt.Errorf("%w: %s", producer.ErrNoApproval, id)
	}
	return &rec, nil
}

// relay submits the signed decision d as an exec.decide job of d's tenant
// and waits for its first progress or terminal event. The default
// tenant's goes through the producer exactly as `toolq approve` submits
// it; a named tenant's on that tenant's decide subject in the toolq
// account (operator.PublishJob, as a requeue goes to its tenant), where
// the worker decides only that tenant's approval and takes the decision
// only from that tenant's approvers. job is nil when nothing was
// submitted.
func (s *Server) relay(ctx context.Context, d *contracts.ExecDecision) (*contracts.Job, *contracts.Event, error) {
	if d.Tenant == "" {
		job, err := s.p.Decide(ctx, d, &producer.SubmitOpts{Session: s.cfg.DecideSession, Progress: true})
		if err != nil {
			return nil, nil, err
		}
		s.log.Info("console relayed a decision", "approval", d.ApprovalID, "verdict", d.Verdict, "always", d.Always, "approver", d.Approver, "decide_job", job.ID)
		ev, err := s.p.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Progress: true})
		return job, ev, err
	}
	input, err := json.Marshal(contracts.ExecDecideInput{Decision: *d})
	if err != nil {
		return nil, nil, err
	}
	job := &contracts.Job{
		ID: nuid.Next(), Tool: contracts.ToolExecDecide, Session: s.cfg.DecideSession, Input: input,
		Progress: true, CreatedAt: time.Now().UTC(), Tenant: d.Tenant,
	}
	// Subscribed before the publish: the job's events cannot come first.
	sub, err := s.nc.SubscribeSync(s.cfg.Subjects.TenantEvent(job.Tenant, job.Session, job.ID))
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, _, err := operator.PublishJob(ctx, s.js, s.cfg.Subjects, job); err != nil {
		return nil, nil, err
	}
	s.log.Info("console relayed a decision", "tenant", d.Tenant, "approval", d.ApprovalID, "verdict", d.Verdict, "approver", d.Approver, "decide_job", job.ID)
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return job, nil, err
		}
		var ev contracts.Event
		if json.Unmarshal(m.Data, &ev) != nil || ev.Data.JobID != job.ID {
			continue
		}
		if ev.Data.Status.Terminal() || ev.Data.Status == contracts.StatusProgress {
			return job, &ev, nil
		}
	}
}

func orDefault(tenant string) string {
	if tenant == "" {
		return "(default)"
	}
	return tenant
}
