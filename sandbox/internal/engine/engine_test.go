package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

var (
	rtOnce sync.Once
	rtErr  error
	shared *Runtime
)

// testRuntime is shared: compiling under -race takes seconds.
func testRuntime(tb testing.TB) *Runtime {
	tb.Helper()
	rtOnce.Do(func() {
		wasm, err := EmbeddedWasm()
		if err != nil {
			rtErr = err
			return
		}
		shared, rtErr = New(context.Background(), Config{Wasm: wasm, CompilationCacheDir: cacheDir(), MemoryLimitPages: 512})
	})
	require.NoError(tb, rtErr)
	return shared
}

func cacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return d + "/toolq/wazero"
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		_ = shared.Close(context.Background())
	}
	os.Exit(code)
}

func TestMissingWasm(t *testing.T) {
	t.Parallel()
	_, err := loadWasm(fstest.MapFS{"wasm/README.md": {Data: []byte("x")}})
	require.ErrorIs(t, err, ErrWasmMissing)
	require.ErrorContains(t, err, "make wasm")
	_, err = loadWasm(fstest.MapFS{"wasm/quickjs.wasm": {Data: []byte("not the pinned build")}})
	require.ErrorContains(t, err, "sha256")
}

func TestEvalAndStrings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	vm, err := testRuntime(t).NewVM(ctx)
	require.NoError(t, err)
	defer vm.Close(ctx)

	v, err := vm.Eval(ctx, "6 * 7", "t.js", 0)
	require.NoError(t, err)
	f, err := vm.Float64(ctx, v)
	require.NoError(t, err)
	require.InDelta(t, 42.0, f, 0)
	vm.Free(ctx, v)

	s, err := vm.NewString(ctx, "héllo\x00世界")
	require.NoError(t, err)
	got, err := vm.String(ctx, s)
	require.NoError(t, err)
	require.Equal(t, "héllo\x00世界", got)
	vm.Free(ctx, s)

	// WTF-8 out: a lone surrogate comes back as its 3-byte encoding.
	v, err = vm.Eval(ctx, `"a\ud800b"`, "t.js", 0)
	require.NoError(t, err)
	got, err = vm.String(ctx, v)
	require.NoError(t, err)
	require.Equal(t, "a\xed\xa0\x80b", got)
	vm.Free(ctx, v)

	_, err = vm.Eval(ctx, "null.x", "t.js", 0)
	var je *JSError
	require.ErrorAs(t, err, &je)
	require.Equal(t, "TypeError", je.Name)
	require.Contains(t, je.Stack, "t.js")
	require.False(t, je.Uncatchable)

	_, err = vm.Eval(ctx, "throw 7", "t.js", 0)
	require.ErrorAs(t, err, &je)
	require.Equal(t, "7", je.Message)
}

type promiseHandler struct{ resolve, reject Value }

func (h *promiseHandler) HostCall(ctx context.Context, vm *VM, name string, _ Value, args []Value) (Value, error) {
	if name == "fail" {
		return 0, errors.New("host says no")
	}
	p, res, rej, err := vm.NewPromise(ctx)
	h.resolve, h.reject = res, rej
	return p, err
}

func (h *promiseHandler) Interrupt(context.Context) bool { return false }

// TestPromiseAcrossRestore: a host promise pending in one instance is
// settled in a fresh instance restored from its memory.
func TestPromiseAcrossRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := testRuntime(t)
	vm, err := rt.NewVM(ctx)
	require.NoError(t, err)
	defer vm.Close(ctx)
	h := &promiseHandler{}
	vm.SetHandler(h)
	for _, name := range []string{"later", "fail"} {
		fn, err := vm.NewHostFunction(ctx, name, 0)
		require.NoError(t, err)
		g, err := vm.Global(ctx)
		require.NoError(t, err)
		require.NoError(t, vm.SetProp(ctx, g, name, fn))
		vm.Free(ctx, g)
		vm.Free(ctx, fn)
	}
	v, err := vm.Eval(ctx, `var out = "none"; try { fail() } catch (e) { out = e.message }
(async () => { const x = await later(); out = out + "|" + x; })(); 0`, "t.js", 0)
	require.NoError(t, err)
	vm.Free(ctx, v)
	require.NoError(t, vm.ExecutePendingJobs(ctx))

	mem := vm.MemoryCopy()
	regs, err := vm.Registers(ctx)
	require.NoError(t, err)
	vm2, err := rt.Restore(ctx, mem, regs)
	require.NoError(t, err)
	defer vm2.Close(ctx)
	vm2.SetHandler(h)
	s, err := vm2.NewString(ctx, "resolved")
	require.NoError(t, err)
	undef, err := vm2.Undefined(ctx)
	require.NoError(t, err)
	r, err := vm2.Call(ctx, h.resolve, undef, s)
	require.NoError(t, err)
	vm2.Free(ctx, r)
	require.NoError(t, vm2.ExecutePendingJobs(ctx))
	out, err := vm2.Eval(ctx, "out", "t.js", 0)
	require.NoError(t, err)
	got, err := vm2.String(ctx, out)
	require.NoError(t, err)
	require.Equal(t, "host says no|resolved", got)
}

// TestTrapKillsVM: a trap marks the VM dead; the pool never hands it out
// again.
func TestTrapKillsVM(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := testRuntime(t)
	pool := NewPool(rt, 2, nil)
	defer pool.Close(ctx)
	vm, err := pool.Get(ctx)
	require.NoError(t, err)
	_, err = vm.call(ctx, vm.fn.freeValue, 0xFFFFFFF0)
	var trap *TrapError
	require.ErrorAs(t, err, &trap)
	require.True(t, vm.Dead())
	_, err = vm.Eval(ctx, "1", "t.js", 0)
	require.ErrorIs(t, err, ErrDead)
	pool.Put(ctx, vm)
	require.Equal(t, 0, pool.Idle())

	healthy, err := pool.Get(ctx)
	require.NoError(t, err)
	require.NotSame(t, vm, healthy)
	v, err := healthy.Eval(ctx, "globalThis.leak = 'secret'; 1", "t.js", 0)
	require.NoError(t, err)
	healthy.Free(ctx, v)
	pool.Put(ctx, healthy)
	require.Equal(t, 1, pool.Idle())
	again, err := pool.Get(ctx)
	require.NoError(t, err)
	require.Same(t, healthy, again)
	v, err = again.Eval(ctx, "typeof leak", "t.js", 0)
	require.NoError(t, err)
	got, err := again.String(ctx, v)
	require.NoError(t, err)
	require.Equal(t, "undefined", got, "a reused VM holds the clean image again")
	again.Close(ctx)
}

func TestImageIsDeterministic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := testRuntime(t)
	wasm, err := EmbeddedWasm()
	require.NoError(t, err)
	rt2, err := New(ctx, Config{Wasm: wasm, CompilationCacheDir: cacheDir(), MemoryLimitPages: 512})
	require.NoError(t, err)
	defer rt2.Close(ctx)
	require.Equal(t, rt.ImageSHA256, rt2.ImageSHA256)
	require.Equal(t, rt.WasmSHA256, rt2.WasmSHA256)
}

func TestRestoreRefusesBadMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := testRuntime(t)
	_, err := rt.Restore(ctx, make([]byte, 100), rt.ImageRegisters())
	require.Error(t, err)
	_, err = rt.Restore(ctx, make([]byte, PageSize), rt.ImageRegisters())
	require.Error(t, err)
	_, err = rt.Restore(ctx, make([]byte, 1024*PageSize), rt.ImageRegisters())
	require.ErrorContains(t, err, "grow")
}

// TestPoolCounts: the pool tells its observer the idle and in-use counts
// after every change, in order: a fresh VM, one given back, one taken from
// the idle ones, a discarded one, one past the pool's size, the close.
func TestPoolCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := testRuntime(t)
	var seen [][2]int
	pool := NewPool(rt, 1, func(idle, inUse int) { seen = append(seen, [2]int{idle, inUse}) })
	a, err := pool.Get(ctx) // fresh
	require.NoError(t, err)
	b, err := pool.Get(ctx) // fresh
	require.NoError(t, err)
	pool.Put(ctx, a) // kept
	c, err := pool.Get(ctx)
	require.NoError(t, err)
	require.Same(t, a, c, "taken from the idle ones")
	pool.Discard(ctx, c)
	require.NoError(t, pool.Warm(ctx, 1))
	pool.Put(ctx, b) // past the size: closed
	require.Equal(t, 1, pool.Idle())
	require.Equal(t, 0, pool.InUse())
	pool.Close(ctx)
	require.Equal(t, [][2]int{{0, 1}, {0, 2}, {1, 1}, {0, 2}, {0, 1}, {1, 1}, {1, 0}, {0, 0}}, seen)
}

// TestLoadOverImage: a snapshot's memory written over the image of a pooled
// VM (grown past the image, only the chunks that differ written) gives the
// VM the snapshot's state and exactly its memory; a VM that does not hold
// the image, a dead one and memory sizes that are not pages at least as
// large as the image are refused.
func TestLoadOverImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := testRuntime(t)
	pool := NewPool(rt, 2, nil)
	defer pool.Close(ctx)
	src, err := pool.Get(ctx)
	require.NoError(t, err)
	v, err := src.Eval(ctx, "globalThis.kept = 'x'.repeat(3000000) + 'end'; 1", "t.js", 0)
	require.NoError(t, err)
	src.Free(ctx, v)
	mem := src.MemoryCopy()
	require.Greater(t, len(mem), len(rt.Image()), "the state grew past the image")
	regs, err := src.Registers(ctx)
	require.NoError(t, err)
	err = rt.LoadOverImage(ctx, src, len(mem), regs, func([]byte) error { return nil })
	require.ErrorContains(t, err, "does not hold the image")
	src.Close(ctx)

	dst, err := pool.Get(ctx)
	require.NoError(t, err)
	written := 0
	err = rt.LoadOverImage(ctx, dst, len(mem), regs, func(m []byte) error {
		require.Equal(t, rt.Image(), m[:len(rt.Image())])
		require.Equal(t, make([]byte, len(m)-len(rt.Image())), m[len(rt.Image()):], "pages past the image are zero")
		for i := 0; i < len(m); i += 1024 {
			if !bytes.Equal(m[i:i+1024], mem[i:i+1024]) {
				copy(m[i:i+1024], mem[i:i+1024])
				written++
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Less(t, written, len(mem)/1024, "only the chunks that differ are written")
	require.Equal(t, mem, dst.Memory())
	v, err = dst.Eval(ctx, "kept.length + ':' + kept.slice(-3)", "t.js", 0)
	require.NoError(t, err)
	got, err := dst.String(ctx, v)
	require.NoError(t, err)
	require.Equal(t, "3000003:end", got)
	dst.Close(ctx)

	clean, err := pool.Get(ctx)
	require.NoError(t, err)
	defer clean.Close(ctx)
	for _, size := range []int{len(rt.Image()) - PageSize, len(rt.Image()) + 100, (maxPages + 1) * PageSize} {
		require.Error(t, rt.LoadOverImage(ctx, clean, size, regs, func([]byte) error { return nil }), "size %d", size)
	}
	require.ErrorIs(t, rt.LoadOverImage(ctx, clean, len(rt.Image()), regs, func([]byte) error { return errApplyTest }), errApplyTest)
	clean.Kill()
	require.ErrorIs(t, rt.LoadOverImage(ctx, clean, len(rt.Image()), regs, func([]byte) error { return nil }), ErrDead)
}

var errApplyTest = errors.New("apply failed")

// TestPoolResetsOnGet: a VM given back waits for its image to be loaded
// again; a Get that finds only such VMs loads it itself (here no resetter
// runs) and hands out the clean image, never the run's state.
func TestPoolResetsOnGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := testRuntime(t)
	pool := NewPool(rt, 2, nil)
	defer pool.Close(ctx)
	pool.started = true // no resetter: Put leaves the VM dirty
	vm, err := pool.Get(ctx)
	require.NoError(t, err)
	v, err := vm.Eval(ctx, "globalThis.leak = 'secret'; 1", "t.js", 0)
	require.NoError(t, err)
	vm.Free(ctx, v)
	pool.Put(ctx, vm)
	require.Equal(t, 1, pool.Idle())
	pool.mu.Lock()
	require.Len(t, pool.dirty, 1, "given back, not yet reset")
	pool.mu.Unlock()
	again, err := pool.Get(ctx)
	require.NoError(t, err)
	require.Same(t, vm, again)
	require.Equal(t, rt.Image(), again.Memory())
	v, err = again.Eval(ctx, "typeof leak", "t.js", 0)
	require.NoError(t, err)
	got, err := again.String(ctx, v)
	require.NoError(t, err)
	require.Equal(t, "undefined", got)
	pool.Put(ctx, again)
}

// TestPoolConcurrentReuse: VMs go round the pool from many goroutines while
// the resetter reloads them; every Get hands out the clean image.
func TestPoolConcurrentReuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := testRuntime(t)
	pool := NewPool(rt, 3, nil)
	const workers, rounds = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				vm, err := pool.Get(ctx)
				if err != nil {
					errs <- err
					return
				}
				v, err := vm.Eval(ctx, "typeof leak", "t.js", 0)
				if err == nil {
					var got string
					if got, err = vm.String(ctx, v); err == nil && got != "undefined" {
						err = fmt.Errorf("worker %d round %d: a VM from the pool holds another run's state (%s)", w, i, got)
					}
				}
				if err == nil {
					var set Value
					if set, err = vm.Eval(ctx, "globalThis.leak = 1; 1", "t.js", 0); err == nil {
						vm.Free(ctx, set)
					}
				}
				if err != nil {
					errs <- err
				}
				pool.Put(ctx, vm)
			}
		}()
	}
	wg.Wait()
	pool.Close(ctx)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 0, pool.Idle())
	require.Equal(t, 0, pool.InUse())
}

// BenchmarkReset: a VM that ran a little code (as a run does) loaded back
// with the image, as the pool's resetter does after each run.
func BenchmarkReset(b *testing.B) {
	ctx := context.Background()
	rt := testRuntime(b)
	vm, err := rt.NewVM(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Close(ctx)
	for b.Loop() {
		b.StopTimer()
		v, err := vm.Eval(ctx, "globalThis.x = [1, 2, 3].map(n => n * 2).join(','); x", "b.js", 0)
		if err != nil {
			b.Fatal(err)
		}
		vm.Free(ctx, v)
		b.StartTimer()
		if err := rt.Reset(ctx, vm); err != nil {
			b.Fatal(err)
		}
	}
}
