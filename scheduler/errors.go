package scheduler

import (
	"errors"

	"github.com/toolq/toolq/contracts"
)

// Errors. Bad schedules are refused at creation with a *contracts.Error of
// code invalid_input (errors.Is(err, contracts.ErrInvalidInput)).
var (
	// ErrNotFound is returned for a schedule id that does not exist.
	ErrNotFound = errors.New("scheduler: schedule not found")
	// ErrExists is returned by Create for an id that is already taken.
	ErrExists = errors.New("scheduler: schedule already exists")
	// ErrSchedulesDisabled is returned by the NATS engine when the
	// schedules stream does not allow message schedules (nats-server < 2.14
	// or a stream created without AllowMsgSchedules).
	ErrSchedulesDisabled = errors.New("scheduler: the schedules stream does not allow message schedules")
)

// invalid is shorthand for an invalid_input error.
func invalid(format string, args ...any) error {
	return contracts.Errorf(contracts.CodeInvalidInput, format, args...)
}
