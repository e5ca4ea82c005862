// Package shell is the core of toolq's approval-gated exec tool (the exec contract):
// the job's input, the security policy, approval records with signed
// decisions, and the runner. It imports no bus code; the worker wires these
// pure pieces to JetStream (approval_pending events, the toolq_approvals
// bucket, the approve and deny commands).
//
// # Input
//
// DecodeInput decodes an exec job's input strictly and applies the contract's
// defaults (host sandbox, timeout 1800 s, yieldMs 10000). Bad input is a
// *contracts.Error with code invalid_input.
//
// # Policy
//
// A Policy comes from worker config. Effective combines it with a job, which
// can only make it stricter. Evaluate parses the command with
// mvdan.cc/sh/v3/syntax (bash dialect) and returns a Decision: Allow,
// NeedsApproval (with the reason, the resolved argv and the binaries an
// "always" approval would allowlist), or Deny (with the reason). A refusal is
// never an error.
//
// In allowlist mode every pipeline segment, across ;, && and ||, must
// resolve through the fixed PATH to an allowlisted absolute path, or to a
// safe bin used stdin-only; every word must be a fixed string. Redirections
// and other shell constructs are misses. Command and process substitution,
// subshells, eval-like builtins, here-documents, expansions or globs in
// command position, and PATH, LD_* or DYLD_* assignments are refused
// outright unless the policy allows them, and then they still need a
// person. Wrappers (env, sh -c, xargs, nice, timeout, sudo, …) never pass on
// their own, and an allowlisted binary misses when its arguments make it run
// another program (git -c, tar --to-command, find -exec, sed's e command,
// make, npm run, …) unless the worker's Policy.ArgAllow waives that rule
// for it (ArgRuleNames lists the rules). An allowed command runs as a script
// rebuilt from its resolved argv, so what runs is what was checked.
//
// Environment overrides pass only when DefaultEnvAllow or the worker's
// Policy.EnvAllow lists them (Policy.CheckEnv), on every host and in every
// mode, full included. PATH (any case), LD_*, DYLD_* and other loader or
// shell-startup variables (EnvRefusal) are refused even when listed.
//
// # Approvals
//
// NewPlan fixes what will run; NewApproval binds it by Plan.Hash with a
// lifetime. A person answers with an ApprovalDecision signed by an nkey
// (SignDecision); VerifyDecision accepts it only when it is signed by a
// trusted approver key, names this approval and this exact plan hash, and
// the approval has not expired. Deciding once (CAS) is the bus layer's job.
// An "always" approval adds AlwaysEntries: each approved simple command as
// an exact allowlist entry (the binary with exactly those arguments), never
// the whole binary; wrappers and argument-rule hits still ask every time.
//
// # Runner
//
// Runner.Run runs a Plan in its own session and process group and kills the
// whole group on timeout, cancellation, or when the shell exits. RunWith
// adds hooks: live output writers (background sessions) and a Started
// callback (the running-notice timer). Output is
// capped per stream and flagged when cut. host=sandbox runs under
// bubblewrap with its own user, PID, IPC, UTS and network namespaces, no
// capabilities, a read-only system, a private /tmp and the workdir as the
// only writable host path; without a working bwrap it fails closed with
// runtime_unavailable. host=worker runs on the worker itself, only when
// both the policy and the runner allow it. The command never inherits the
// worker's environment.
package shell
