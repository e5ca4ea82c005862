package sandbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox"
)

// signalBridge answers "openclaw:core:echo" at once and closes started on
// its first call, so a test learns that the guest is running.
type signalBridge struct {
	sandbox.CatalogBridge
	started chan struct{}
}

func (b *signalBridge) Call(_ context.Context, call sandbox.ToolCall) (sandbox.CallOutcome, error) {
	select {
	case <-b.started:
	default:
		close(b.started)
	}
	return sandbox.CallOutcome{Value: call.Input}, nil
}

// TestInfiniteLoopTimesOut: a busy guest is interrupted at its deadline,
// also when it catches everything, and other VMs keep running meanwhile.
func TestInfiniteLoopTimesOut(t *testing.T) {
	t.Parallel()
	loops := []string{
		`await tools.echo(1); while (true) {}`,
		`await tools.echo(1); for (;;) { try { while (true) {} } catch (e) {} finally { continue; } }`,
		`await tools.echo(1); const spin = async () => { for (;;) await null; }; await spin();`,
		`await tools.echo(1); (function f() { try { f(); } catch (e) { f(); } })();`,
	}
	for _, code := range loops {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			bridge := &signalBridge{started: make(chan struct{})}
			done := make(chan *sandbox.Outcome, 1)
			go func() {
				out, err := testEngine.Exec(context.Background(), &sandbox.ExecRequest{
					Input: sandbox.Input{Code: code}, Catalog: testCatalog(), Bridge: bridge,
					Limits: sandbox.Limits{TimeoutMs: 3000},
				})
				if err != nil {
					out = &sandbox.Outcome{Result: sandbox.Result{Error: err.Error()}}
				}
				done <- out
			}()
			<-bridge.started
			// While the loop spins, another run completes.
			b := setup(t)
			requireCompleted(t, b.exec(t, `return 6 * 7`, sandbox.Limits{}), `42`)
			out := <-done
			requireFailed(t, out, "timeout", "timed out after 3000 ms")
		})
	}
}

func TestContextEndsRun(t *testing.T) {
	t.Parallel()
	bridge := &signalBridge{started: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-bridge.started
		cancel()
	}()
	out, err := testEngine.Exec(ctx, &sandbox.ExecRequest{
		Input: sandbox.Input{Code: `await tools.echo(1); while (true) {}`}, Catalog: testCatalog(), Bridge: bridge,
	})
	require.Nil(t, out)
	require.ErrorIs(t, err, contracts.ErrCancelled)

	ctx, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	_, err = testEngine.Exec(ctx, &sandbox.ExecRequest{Input: sandbox.Input{Code: `return 1`}})
	require.ErrorIs(t, err, contracts.ErrCancelled)
}

// TestMemoryBomb: exceeding the memory limit fails the run (the VM is never
// reused) and the next run works.
func TestMemoryBomb(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bombs := []string{
		`const a = []; while (true) a.push(new Array(100000).fill(1.5));`,
		`const a = []; try { while (true) a.push({x: "y".repeat(1000) + Math.random()}); } catch (e) { return "caught " + e; }`,
		`let s = "x"; const keep = []; while (true) { s = s + s; keep.push(s + "!"); }`,
		`const a = []; while (true) a.push(new Uint8Array(1 << 20));`,
	}
	for _, code := range bombs {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			out := b.exec(t, code, sandbox.Limits{MemoryLimitBytes: 8 << 20})
			require.Equal(t, sandbox.StatusFailed, out.Result.Status, "value %s", out.Result.Value)
			t.Log(out.Result.Error, out.Result.Code)
			require.Regexp(t, `memory|RangeError|invalid (string|array) length|too long`, out.Result.Error)
			requireCompleted(t, b.exec(t, `return [1, 2, 3].map((x) => x * 2)`, sandbox.Limits{MemoryLimitBytes: 8 << 20}), `[2,4,6]`)
		})
	}
	t.Run("limit above the engine maximum", func(t *testing.T) {
		t.Parallel()
		requireFailed(t, b.exec(t, `return 1`, sandbox.Limits{MemoryLimitBytes: 1 << 40}), "invalid_input", "memoryLimitBytes")
	})
}

func TestStackOverflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.exec(t, `function f(n) { return f(n + 1) + 1; } try { f(0); } catch (e) { return e.name + ": " + e.message; }`, sandbox.Limits{})
	requireCompleted(t, out, `"RangeError: Maximum call stack size exceeded"`)
	out = b.exec(t, `const deep = (n) => n === 0 ? [] : [deep(n - 1)]; return JSON.stringify(deep(100000)).length`, sandbox.Limits{})
	require.Equal(t, sandbox.StatusFailed, out.Result.Status)
	requireCompleted(t, b.exec(t, `return "still fine"`, sandbox.Limits{}), `"still fine"`)
}

func TestOutputLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limits := sandbox.Limits{MaxOutputBytes: 1000}
	tests := []struct{ name, code string }{
		{"text", `for (let i = 0; i < 1000; i++) text("0123456789");`},
		{"text caught", `for (let i = 0; i < 1000; i++) { try { text("0123456789"); } catch (e) {} } return "swallowed"`},
		{"json", `for (let i = 0; i < 1000; i++) json({i});`},
		{"value", `return "x".repeat(2000)`},
		{"output then value", `text("x".repeat(600)); return "y".repeat(600)`},
		{"while waiting", `text("x".repeat(600)); await tools.slow_add({}); text("y".repeat(600));`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := b.exec(t, tt.code, limits)
			if out.Result.Status == sandbox.StatusWaiting {
				out = b.resume(t, out.Snapshot, ok("call_1", 1))
			}
			requireFailed(t, out, "output_limit_exceeded", "maxOutputBytes (1000)")
			n := 0
			for _, o := range out.Result.Output {
				n += len(o.Text) + len(o.Value)
			}
			require.LessOrEqual(t, n, 1000)
		})
	}
	requireCompleted(t, b.exec(t, `text("x".repeat(900)); return 1`, limits), `1`)
}

// FuzzJSONCrossing sends arbitrary strings and JSON documents through the
// host→guest→host path: a tool result into the guest, the guest's value and
// output back. Whatever goes in, the run completes, the string round-trips
// and every result is valid UTF-8 JSON.
func FuzzJSONCrossing(f *testing.F) {
	for _, s := range []string{
		"", "plain", "héllo 世界", "\x00nul", "\xed\xa0\x80", "\xff\xfe", `{"a":[1,2,{"b":null}]}`,
		"\"quoted\\\"", "\u2028\u2029", "1e400", "-0", `[1e308, 5e-324]`, "🎉", `{"__proto__":{"x":1}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := &bundle{e: testEngine, bridge: newBridge()}
		str, err := json.Marshal(s)
		require.NoError(t, err)
		var want string
		require.NoError(t, json.Unmarshal(str, &want))
		raw := "null"
		if json.Valid([]byte(s)) {
			raw = s
		}
		b.bridge.answer["openclaw:core:explode"] = func(json.RawMessage) sandbox.CallOutcome {
			return sandbox.CallOutcome{Value: json.RawMessage(raw)}
		}
		out := b.exec(t, `const v = await tools.echo(`+string(str)+`);
const doc = await tools.callValue("openclaw:core:explode");
text(v); json(v); json(doc); return [v, typeof v, doc];`, sandbox.Limits{})
		require.Equal(t, sandbox.StatusCompleted, out.Result.Status, out.Result.Error)
		var got []json.RawMessage
		require.NoError(t, json.Unmarshal(out.Result.Value, &got))
		require.Len(t, got, 3)
		require.JSONEq(t, string(str), string(got[0]))
		require.JSONEq(t, `"string"`, string(got[1]))
		require.Len(t, out.Result.Output, 3)
		require.Equal(t, want, out.Result.Output[0].Text)
		require.JSONEq(t, string(str), string(out.Result.Output[1].Value))
		res, err := json.Marshal(out.Result)
		require.NoError(t, err)
		require.True(t, json.Valid(res))
		require.True(t, utf8.Valid(res))
	})
}

func TestResumeTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.exec(t, `const v = await tools.slow_add({}); if (v === "spin") { while (true) {} } return v`, sandbox.Limits{TimeoutMs: 200})
	require.Equal(t, sandbox.StatusWaiting, out.Result.Status)
	requireFailed(t, b.resume(t, out.Snapshot, ok("call_1", "spin")), "timeout", "timed out after 200 ms")
	requireCompleted(t, b.resume(t, out.Snapshot, ok("call_1", "fine")), `"fine"`)
}

func TestEngineConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: []byte("short")})
	require.ErrorContains(t, err, "SnapshotKey")
	_, err = sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: testKey, Wasm: []byte("\x00asm\x01\x00\x00\x00garbage")})
	require.ErrorIs(t, err, contracts.ErrRuntimeUnavailable)
	_, err = sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: testKey, MaxMemoryLimitBytes: 4 << 30})
	require.ErrorContains(t, err, "1 GiB")
	_, err = sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: testKey, StackSizeBytes: 1 << 20})
	require.ErrorContains(t, err, "512 KiB")
	require.Equal(t, sandbox.DefaultLimits(), testEngine.Limits())
}
