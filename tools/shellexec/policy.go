package shellexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/shell"
)

// sharedPolicy reads the shared policy from the policy bucket; the zero
// Policy when there is none. A policy that does not decode or validate is
// an error: it may have meant to tighten the modes, so it is not ignored.
func (s *ShellExec) sharedPolicy(ctx context.Context) (shell.Policy, uint64, error) {
	e, err := s.policyKV.Get(ctx, s.cfg.PolicyKey)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return shell.Policy{}, 0, nil
		}
		return shell.Policy{}, 0, fmt.Errorf("shellexec: read shared policy: %w", err)
	}
	p, err := decodePolicy(e.Value())
	if err != nil {
		return shell.Policy{}, 0, fmt.Errorf("shellexec: shared policy %q: %w", s.cfg.PolicyKey, err)
	}
	return p, e.Revision(), nil
}

// DecodePolicy decodes a policy strictly (unknown fields refused) and
// validates it.
func DecodePolicy(data []byte) (shell.Policy, error) { return decodePolicy(data) }

func decodePolicy(data []byte) (shell.Policy, error) {
	var p shell.Policy
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, err
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

// merge combines the worker's policy with the shared one for a job on host:
// the shared allowlist and safe bins are added, the shared modes can only
// tighten the worker's, and every host setting (PATH, shell, workdir roots,
// worker host, the Allow* constructs) stays the worker's.
func merge(worker, shared shell.Policy, host shell.Host) shell.Policy {
	p := worker
	p.Allowlist = slices.Clone(worker.Allowlist)
	for _, a := range shared.Allowlist {
		if !slices.Contains(p.Allowlist, a) {
			p.Allowlist = append(p.Allowlist, a)
		}
	}
	p.SafeBins = slices.Clone(worker.SafeBins)
	for _, b := range shared.SafeBins {
		if !slices.Contains(p.SafeBins, b) {
			p.SafeBins = append(p.SafeBins, b)
		}
	}
	if host == "" {
		host = shell.HostSandbox
	}
	if shared.Security != "" {
		base := p.Security
		if base == "" {
			base = shell.DefaultSecurity(host)
		}
		p.Security = shell.StricterSecurity(base, shared.Security)
	}
	if shared.Ask != "" {
		base := p.Ask
		if base == "" {
			base = shell.AskOnMiss
		}
		p.Ask = shell.StricterAsk(base, shared.Ask)
	}
	return p
}

// policyFor returns the policy a job runs under: worker config merged with
// the shared policy, then made stricter by the job (shell.Effective).
func (s *ShellExec) policyFor(ctx context.Context, in *shell.Input) (shell.Policy, error) {
	shared, _, err := s.sharedPolicy(ctx)
	if err != nil {
		return shell.Policy{}, err
	}
	return shell.Effective(merge(s.cfg.Policy, shared, in.Host), in), nil
}

// allow adds bins to the shared allowlist ("approve --always"), by a write
// conditional on the revision read.
func (s *ShellExec) allow(ctx context.Context, bins []string) error {
	if len(bins) == 0 {
		return nil
	}
	for range 20 {
		shared, rev, err := s.sharedPolicy(ctx)
		if err != nil {
			return err
		}
		next := shared.WithAllowed(bins...)
		if len(next.Allowlist) == len(shared.Allowlist) {
			return nil
		}
		data, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = s.policyKV.Create(ctx, s.cfg.PolicyKey, data)
		} else {
			_, err = s.policyKV.Update(ctx, s.cfg.PolicyKey, data, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !bus.IsWrongLastSequence(err) {
			return fmt.Errorf("shellexec: update shared policy: %w", err)
		}
	}
	return contracts.Errorf(contracts.CodeInternalError, "shared policy kept changing")
}
