package shellexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// Approval statuses in a record.
const (
	StatusPending   = contracts.ExecApprovalPending
	StatusApproved  = contracts.ExecApprovalApproved
	StatusDenied    = contracts.ExecApprovalDenied
	StatusCancelled = contracts.ExecApprovalCancelled
)

// Record is an approval as kept in the toolq_approvals bucket under
// contracts.ExecApprovalKey(tenant, id): a tenant's approval ids are its
// own, and a decision looks only under its job's tenant.
// It is created pending with the approval's TTL (its expiry denies the job
// with reason timeout) and decided once, by a write conditional on the
// revision read, which keeps it DecidedTTL longer. A DecideJob's
// redelivery resumes its decision, any other job's does nothing.
type Record = contracts.ExecApprovalRecord

// store reads and writes approval records.
type store struct {
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	subj string // $KV.<bucket>.
}

var (
	errNoApproval = errors.New("shellexec: no such approval")
	errStale      = errors.New("shellexec: approval record changed")
)

func (s *store) load(ctx context.Context, tenant, id string) (*Record, uint64, error) {
	e, err := s.kv.Get(ctx, contracts.ExecApprovalKey(tenant, id))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, 0, errNoApproval
		}
		return nil, 0, fmt.Errorf("shellexec: load approval %s: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("shellexec: approval record %s: %w", id, err)
	}
	if r.Approval.Tenant != tenant || r.Approval.ID != id {
		return nil, 0, fmt.Errorf("shellexec: approval record under %s names another approval", e.Key())
	}
	return &r, e.Revision(), nil
}

// save writes r if the record is still at rev (0: it must not exist) with a
// TTL of its own, so an undecided approval expires and leaves a marker.
func (s *store) save(ctx context.Context, r *Record, rev uint64, ttl time.Duration) (uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	msg := &nats.Msg{Subject: s.subj + contracts.ExecApprovalKey(r.Approval.Tenant, r.Approval.ID), Data: data}
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		if bus.IsWrongLastSequence(err) {
			return 0, errStale
		}
		return 0, fmt.Errorf("shellexec: save approval %s: %w", r.Approval.ID, err)
	}
	return ack.Sequence, nil
}
