package mcp_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// stdioServer is the test server program, built once for the package.
var stdioServer string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcp-testserver-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stdioServer = filepath.Join(dir, "testserver")
	build := exec.Command("go", "build", "-o", stdioServer, "github.com/toolq/toolq/tools/mcp/internal/testserver/stdio")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the stdio test server: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		// The test HTTP servers keep the sessions of clients that could not
		// say goodbye (the server was closed under them); they are the
		// test server's goroutines, not this package's.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/modelcontextprotocol/go-sdk/mcp.(*streamableServerConn).Read")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
