package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
)

// The operator's commands (dlq, jobs) read and change the streams of the
// toolq account: the DLQ and the jobs streams of every tenant. Tenant
// accounts reach none of them (deploy/nats/tenants.conf exports no
// JetStream API), so these commands refuse a tenant's user up front instead
// of showing anything (RATIONALE "Operator commands: dlq and jobs").

// errOperatorOnly is the refusal a tenant's user gets from an operator
// command.
func errOperatorOnly(what string) error {
	return contracts.Errorf(contracts.CodeInvalidInput,
		"%s is an operator command: the dead-letter and jobs streams belong to the toolq account, which every tenant's dead letters and jobs share, and a tenant account reaches none of them; ask the operator (a user of the toolq account)", what)
}

// operatorBus connects to the toolq account's JetStream for command what.
// The check asks the server for the account's JetStream: a tenant's user
// that did not say --tenant-account gets the same refusal as one that did.
func (g *globals) operatorBus(ctx context.Context, what string) (*nats.Conn, jetstream.JetStream, error) {
	if g.tenantAccount {
		return nil, nil, errOperatorOnly(what)
	}
	nc, err := g.connect("toolq " + what)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	// A user whose permissions do not reach the JetStream API (a tenant's
	// agent) has its request dropped by the server with an error that
	// arrives before the flush's answer: no need to wait out a timeout.
	// The probe's error is expected: it is not logged as a surprise.
	logErr := nc.ErrorHandler()
	nc.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	if err := nc.Publish("$JS.API.INFO", nil); err == nil && nc.Flush() == nil && errors.Is(nc.LastError(), nats.ErrPermissionViolation) {
		nc.Close()
		return nil, nil, errOperatorOnly(what)
	}
	nc.SetErrorHandler(logErr)
	ctx, cancel := context.WithTimeout(ctx, min(g.timeout, 5*time.Second))
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		err = operatorErr(nc, what, err)
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// operatorErr explains a JetStream API error that means the account has no
// JetStream (a tenant account, whose users may not even ask).
func operatorErr(nc *nats.Conn, what string, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(nc.LastError(), nats.ErrPermissionViolation):
		return errOperatorOnly(what)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%s: the server's JetStream does not answer (is this the toolq account, and does JetStream run?): %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// askYes asks prompt on the terminal unless yes is set. Without a terminal
// it refuses: a script says --yes.
func askYes(cmd *cobra.Command, g *globals, yes bool, prompt string) error {
	if yes {
		return nil
	}
	in := cmd.InOrStdin()
	if !isTerminal(in) {
		return contracts.Errorf(contracts.CodeInvalidInput, "no terminal to confirm on: pass --yes")
	}
	fmt.Fprint(g.stderr, prompt+" [y/N] ")
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		return contracts.Errorf(contracts.CodeDenied, "not confirmed: nothing done")
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return contracts.Errorf(contracts.CodeDenied, "not confirmed: nothing done")
}

// clip cuts s to n runes for a table cell.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
