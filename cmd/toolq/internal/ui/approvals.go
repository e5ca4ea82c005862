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
	p.Data = rows
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
	if d.Tenant != "" {
		refuse(http.StatusBadRequest, "approval of tenant %s: a tenant's approvals are decided by its approvers through the tenant's own account (toolq approve --tenant-account), not through the operator's console", d.Tenant)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	rec, err := s.p.Approval(ctx, d.ApprovalID)
	if errors.Is(err, producer.ErrNoApproval) {
		refuse(http.StatusNotFound, "approval %s is unknown or expired", d.ApprovalID)
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
	case d.Always:
		refuse(http.StatusBadRequest, "the console does not relay always-decisions (they change the fleet-wide allowlist): use toolq approve --always")
		return
	}
	// The signature must be the key's own over this decision: a decision
	// damaged on the way is refused here with a plain message. Whether the
	// key may decide is the worker's call alone.
	if err := shell.VerifyDecision(d, a, []string{d.Approver}, time.Now()); err != nil {
		refuse(http.StatusBadRequest, "the decision's signature does not verify: %v", err)
		return
	}
	job, err := s.p.Decide(ctx, d, &producer.SubmitOpts{Session: s.cfg.DecideSession, Progress: true})
	if err != nil {
		refuse(http.StatusBadGateway, "submit decision: %v", err)
		return
	}
	s.log.Info("console relayed a decision", "approval", a.ID, "verdict", d.Verdict, "approver", d.Approver, "decide_job", job.ID)
	got, err := s.p.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Progress: true})
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
