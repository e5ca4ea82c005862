package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolq/toolq/sandbox"
)

// testEngine is shared by the tests of this package: compiling quickjs.wasm
// takes seconds under the race detector.
var testEngine *sandbox.Engine

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestMain(m *testing.M) {
	ctx := context.Background()
	e, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: testKey})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testEngine = e
	code := m.Run()
	if other != nil {
		_ = other.Close(ctx)
	}
	if err := e.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
