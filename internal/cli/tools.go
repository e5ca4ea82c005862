package cli

import "github.com/toolq/toolq/worker"

// registerTools adds the tools of this binary beyond the worker's built-ins.
func registerTools(_ *globals, _ *worker.Worker) error {
	return nil
}
