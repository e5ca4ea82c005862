// Package engine binds the quickjs-wasi reactor (QuickJS-NG compiled to WASI)
// on wazero: one runtime and compiled module per Runtime, VMs as module
// instances restored from a clean post-init memory image.
package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// PageSize is the wasm page size.
const PageSize = 65536

// maxPages is the most pages a wasm32 memory can have.
const maxPages = 65536

// Config configures a Runtime.
type Config struct {
	// Wasm is the quickjs.wasm module.
	Wasm []byte
	// CompilationCacheDir, when set, keeps wazero's compiled code on disk.
	CompilationCacheDir string
	// MemoryLimitPages caps every instance's linear memory.
	MemoryLimitPages uint32
	// InitMask is passed to qjs_init2 (intrinsics); zero means all.
	InitMask uint32
	// GCThreshold, when set, is the QuickJS heap size that triggers the
	// first collection in a VM restored from the image.
	GCThreshold uint32
	// Setup runs once in the image VM after qjs_init, before the image is
	// captured. It returns the values the host keeps (their box addresses
	// stay valid in every VM restored from the image).
	Setup func(ctx context.Context, vm *VM) ([]Value, error)
}

// Runtime owns the wazero runtime, the compiled module and the clean
// post-init image.
type Runtime struct {
	r        wazero.Runtime
	cache    wazero.CompilationCache
	compiled wazero.CompiledModule

	// WasmSHA256 is the digest of the module.
	WasmSHA256 [32]byte
	// ImageSHA256 is the digest of the post-init image (with its registers).
	ImageSHA256 [32]byte
	// Roots are the values Setup returned.
	Roots []Value

	image   []byte
	regs    Registers
	scratch uint32
}

// Registers are the machine state kept outside linear memory.
type Registers struct {
	StackPointer uint32
	RuntimePtr   uint32
	ContextPtr   uint32
}

// New compiles the module and builds the post-init image.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	rc := wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(false)
	if cfg.MemoryLimitPages > 0 {
		rc = rc.WithMemoryLimitPages(cfg.MemoryLimitPages)
	}
	rt := &Runtime{WasmSHA256: sha256.Sum256(cfg.Wasm)}
	if cfg.CompilationCacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CompilationCacheDir)
		if err == nil {
			rt.cache = c
		}
	}
	if rt.cache == nil {
		rt.cache = wazero.NewCompilationCache()
	}
	rc = rc.WithCompilationCache(rt.cache)
	rt.r = wazero.NewRuntimeWithConfig(ctx, rc)
	if err := rt.init(ctx, cfg); err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	return rt, nil
}

func (rt *Runtime) init(ctx context.Context, cfg Config) error {
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt.r); err != nil {
		return fmt.Errorf("instantiate wasi: %w", err)
	}
	if err := instantiateHost(ctx, rt.r); err != nil {
		return fmt.Errorf("instantiate host module: %w", err)
	}
	compiled, err := rt.r.CompileModule(ctx, cfg.Wasm)
	if err != nil {
		return fmt.Errorf("compile quickjs.wasm: %w", err)
	}
	rt.compiled = compiled

	// The image VM runs with wazero's deterministic clocks and random source,
	// so the image (and its digest) is the same in every process.
	mod, err := rt.r.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return fmt.Errorf("instantiate quickjs.wasm: %w", err)
	}
	vm, err := newVM(rt, mod)
	if err != nil {
		return err
	}
	defer vm.Close(ctx)
	cctx := vm.Context(ctx)
	if _, err := mod.ExportedFunction("_initialize").Call(cctx); err != nil {
		return fmt.Errorf("_initialize: %w", err)
	}
	var rc uint64
	if cfg.InitMask != 0 {
		rc, err = vm.call1(cctx, vm.fn.init2, uint64(cfg.InitMask))
	} else {
		rc, err = vm.call1(cctx, vm.fn.init)
	}
	if err != nil {
		return fmt.Errorf("qjs_init: %w", err)
	}
	if rc != 0 {
		return fmt.Errorf("qjs_init returned %d", int32(rc))
	}
	if _, err := vm.call1(cctx, vm.fn.setInterruptHandler, 1); err != nil {
		return err
	}
	scratch, err := vm.call1(cctx, vm.fn.malloc, 16)
	if err != nil || scratch == 0 {
		return errors.New("allocate scratch")
	}
	vm.scratch = uint32(scratch)
	rt.scratch = uint32(scratch)
	if cfg.Setup != nil {
		roots, err := cfg.Setup(cctx, vm)
		if err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		rt.Roots = roots
	}
	if err := vm.RunGC(cctx); err != nil {
		return err
	}
	if cfg.GCThreshold > 0 {
		if err := vm.SetGCThreshold(cctx, cfg.GCThreshold); err != nil {
			return err
		}
	}
	regs, err := vm.Registers(cctx)
	if err != nil {
		return err
	}
	rt.regs = regs
	rt.image = vm.MemoryCopy()
	h := sha256.New()
	h.Write(rt.image)
	fmt.Fprintf(h, "%d/%d/%d/%d", regs.StackPointer, regs.RuntimePtr, regs.ContextPtr, rt.scratch)
	copy(rt.ImageSHA256[:], h.Sum(nil))
	return nil
}

// Image returns the clean post-init memory image. Callers must not modify it.
func (rt *Runtime) Image() []byte { return rt.image }

// ImageRegisters returns the registers of the post-init image.
func (rt *Runtime) ImageRegisters() Registers { return rt.regs }

// Close releases the runtime and every instance.
func (rt *Runtime) Close(ctx context.Context) error {
	err := rt.r.Close(ctx)
	if rt.cache != nil {
		if cerr := rt.cache.Close(ctx); err == nil {
			err = cerr
		}
	}
	return err
}

// NewVM returns a fresh instance holding the clean post-init image.
func (rt *Runtime) NewVM(ctx context.Context) (*VM, error) {
	return rt.Restore(ctx, rt.image, rt.regs)
}

// Restore instantiates a fresh module and loads memory and registers into it.
func (rt *Runtime) Restore(ctx context.Context, memory []byte, regs Registers) (*VM, error) {
	if len(memory)%PageSize != 0 || len(memory) < len(rt.image) {
		return nil, fmt.Errorf("restore: memory of %d bytes is not a page multiple at least as large as the image", len(memory))
	}
	mod, err := rt.r.InstantiateModule(ctx, rt.compiled, wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader))
	if err != nil {
		return nil, fmt.Errorf("instantiate quickjs.wasm: %w", err)
	}
	vm, err := newVM(rt, mod)
	if err != nil {
		_ = mod.Close(ctx)
		return nil, err
	}
	vm.scratch = rt.scratch
	if err := vm.load(ctx, memory, regs); err != nil {
		vm.Close(ctx)
		return nil, err
	}
	return vm, nil
}

func (vm *VM) load(ctx context.Context, memory []byte, regs Registers) error {
	mem := vm.mod.Memory()
	n := len(memory) / PageSize
	if n > maxPages {
		return fmt.Errorf("restore: memory of %d bytes exceeds the wasm32 limit", len(memory))
	}
	pages := uint32(n)
	cur := mem.Size() / PageSize
	if pages > cur {
		if _, ok := mem.Grow(pages - cur); !ok {
			return fmt.Errorf("restore: cannot grow memory to %d pages", pages)
		}
	}
	if int(mem.Size()) != len(memory) {
		return fmt.Errorf("restore: memory has %d bytes, want %d", mem.Size(), len(memory))
	}
	if !mem.Write(0, memory) {
		return errors.New("restore: write memory")
	}
	vm.sp.Set(uint64(regs.StackPointer))
	if _, err := vm.call(vm.Context(ctx), vm.fn.setRuntimeAndContext, uint64(regs.RuntimePtr), uint64(regs.ContextPtr)); err != nil {
		return err
	}
	return nil
}

// LoadOverImage restores a snapshot into a VM that holds the clean image
// (one from the pool, untouched since Get): memory grows to size bytes, its
// pages past the image are zeroed, and apply writes what the snapshot
// changed — memory that equals the image is not written at all. The VM then
// holds exactly what a fresh instance restored from the full memory would.
func (rt *Runtime) LoadOverImage(ctx context.Context, vm *VM, size int, regs Registers, apply func(mem []byte) error) error {
	if vm.dead {
		return ErrDead
	}
	if size%PageSize != 0 || size < len(rt.image) || size/PageSize > maxPages {
		return fmt.Errorf("load: memory of %d bytes is not a page multiple at least as large as the image", size)
	}
	mem := vm.mod.Memory()
	if int(mem.Size()) != len(rt.image) {
		return fmt.Errorf("load: a VM of %d bytes does not hold the image", mem.Size())
	}
	if size > len(rt.image) {
		if _, ok := mem.Grow(uint32((size - len(rt.image)) / PageSize)); !ok { //nolint:gosec // G115: size is at most maxPages pages, checked above
			return fmt.Errorf("restore: cannot grow memory to %d pages", size/PageSize)
		}
	}
	buf, ok := mem.Read(0, mem.Size())
	if !ok || len(buf) != size {
		return fmt.Errorf("restore: memory has %d bytes, want %d", mem.Size(), size)
	}
	// A grown memory is zeroed by wazero when it allocates; clear it here
	// anyway, since the snapshot's pages past the image are relative to
	// zeros.
	clear(buf[len(rt.image):])
	if err := apply(buf); err != nil {
		return err
	}
	vm.sp.Set(uint64(regs.StackPointer))
	_, err := vm.call(vm.Context(ctx), vm.fn.setRuntimeAndContext, uint64(regs.RuntimePtr), uint64(regs.ContextPtr))
	return err
}

// Reset loads the clean image into vm again, so that it can serve another
// run. It fails (and the caller must Close the VM) when the VM trapped or its
// memory grew past the image.
func (rt *Runtime) Reset(ctx context.Context, vm *VM) error {
	if vm.dead {
		return ErrDead
	}
	if int(vm.mod.Memory().Size()) != len(rt.image) {
		return errors.New("memory grew past the image")
	}
	vm.handler = nil
	return vm.load(ctx, rt.image, rt.regs)
}

func instantiateHost(ctx context.Context, r wazero.Runtime) error {
	i32 := api.ValueTypeI32
	b := r.NewHostModuleBuilder("env")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostCall),
		[]api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}).Export("host_call")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostInterrupt),
		nil, []api.ValueType{i32}).Export("host_interrupt")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostPromiseRejection),
		[]api.ValueType{i32, i32, i32}, nil).Export("host_promise_rejection")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostRefuse),
		[]api.ValueType{i32, i32}, []api.ValueType{i32}).Export("host_module_normalize")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostRefuse),
		[]api.ValueType{i32, i32}, []api.ValueType{i32}).Export("host_module_load")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostRefuse),
		[]api.ValueType{i32, i32}, []api.ValueType{i32}).Export("host_get_timezone_offset")
	_, err := b.Instantiate(ctx)
	return err
}
