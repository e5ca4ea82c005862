// Command toolq runs AI-agent tool calls as jobs on NATS JetStream: an
// embedded development bus, workers, and a client for submitting jobs and
// following their events. Run `toolq help` for the commands.
package main

import (
	"os"

	"github.com/toolq/toolq/cmd/toolq/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
