package sandbox

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/sandbox/internal/engine"
)

// TestRestoreOverImage: what Resume does with a snapshot — the changed
// chunks written over the image of a pooled VM — leaves the VM with
// exactly the memory and registers of the snapshot as Decode builds them,
// and the VM, given back, holds the image again when it is next handed out.
func TestRestoreOverImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := NewEngine(ctx, &EngineConfig{SnapshotKey: []byte("0123456789abcdef0123456789abcdef"), PoolSize: 1})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close(ctx)) }()
	out, err := e.Exec(ctx, &ExecRequest{
		Input:   Input{Code: `const big = "y".repeat(20000); const v = await tools.slow_add({a: 1}); return big.length + v`},
		Catalog: []Tool{{CatalogEntry: CatalogEntry{ID: "client:app:slow_add", Name: "slow_add", Source: SourceClient}}},
		Bridge:  pendingBridge{},
	})
	require.NoError(t, err)
	require.Equal(t, StatusWaiting, out.Result.Status, out.Result.Error)

	full, err := e.codec.Decode(out.Snapshot, 0)
	require.NoError(t, err)
	o, err := e.codec.Open(out.Snapshot, 0)
	require.NoError(t, err)
	defer o.Release()
	require.Len(t, e.rt.Image(), o.MemorySize, "the run stayed within the image (a grown VM is not pooled again)")
	vm, err := e.pool.Get(ctx)
	require.NoError(t, err)
	regs := engine.Registers{StackPointer: o.StackPointer, RuntimePtr: o.RuntimePtr, ContextPtr: o.ContextPtr}
	require.NoError(t, e.rt.LoadOverImage(ctx, vm, o.MemorySize, regs, o.Apply))
	require.Equal(t, full.Memory, vm.Memory())
	got, err := vm.Registers(ctx)
	require.NoError(t, err)
	require.Equal(t, regs, got)
	require.NotEqual(t, e.rt.Image(), vm.Memory())

	e.pool.Put(ctx, vm)
	again, err := e.pool.Get(ctx)
	require.NoError(t, err)
	require.Same(t, vm, again)
	require.Equal(t, e.rt.Image(), again.Memory())
	e.pool.Put(ctx, again)
}
