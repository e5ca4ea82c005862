package sandbox

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox/internal/engine"
	"github.com/toolq/toolq/sandbox/internal/snapshot"
)

//go:embed prelude.js
var prelude string

// Limits bound one run. Zero fields take the engine's defaults. JSON names
// follow the code-mode contract's tools.codeMode settings.
type Limits = contracts.CodeModeLimits

// DefaultLimits returns the code-mode contract's defaults.
func DefaultLimits() Limits { return contracts.DefaultCodeModeLimits() }

// withDefaults fills l's zero (or negative) fields from d.
func withDefaults(l, d Limits) Limits {
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&l.TimeoutMs, d.TimeoutMs)
	if l.MemoryLimitBytes <= 0 {
		l.MemoryLimitBytes = d.MemoryLimitBytes
	}
	pick(&l.MaxOutputBytes, d.MaxOutputBytes)
	pick(&l.MaxSnapshotBytes, d.MaxSnapshotBytes)
	pick(&l.MaxPendingToolCalls, d.MaxPendingToolCalls)
	pick(&l.SearchDefaultLimit, d.SearchDefaultLimit)
	pick(&l.MaxSearchLimit, d.MaxSearchLimit)
	pick(&l.MaxOutputItems, d.MaxOutputItems)
	pick(&l.MaxTotalCPUMs, d.MaxTotalCPUMs)
	if l.SearchDefaultLimit > l.MaxSearchLimit {
		l.SearchDefaultLimit = l.MaxSearchLimit
	}
	return l
}

// EngineConfig configures an Engine.
type EngineConfig struct {
	// SnapshotKey signs snapshots (HMAC-SHA256); at least 32 bytes. Every
	// process that resumes a run must hold the key it was signed with: this
	// one or one of SnapshotVerifyKeys.
	SnapshotKey []byte
	// SnapshotKeyID names SnapshotKey in the header of every snapshot it
	// signs, 1 to 64 of [A-Za-z0-9._-]. Default: "k-" and 12 hex digits of
	// the key's SHA-256, so two keys never share an id by accident.
	SnapshotKeyID string
	// SnapshotVerifyKeys are older keys whose snapshots are still accepted
	// (never used to sign): rotate by making the new key current on every
	// worker while keeping the old one here until its runs are over.
	SnapshotVerifyKeys []SnapshotKey
	// Limits are the defaults of runs; zero fields take DefaultLimits.
	Limits Limits
	// MaxMemoryLimitBytes is the largest memoryLimitBytes a run may ask for;
	// it sizes the wasm page cap (2.5× + 2 MiB). At most 1 GiB. Default:
	// Limits.MemoryLimitBytes.
	MaxMemoryLimitBytes int64
	// StackSizeBytes is the QuickJS stack limit (≤ 512 KiB). Default 256 KiB.
	StackSizeBytes int
	// PoolSize is the number of warm VMs kept. Default 2 × GOMAXPROCS.
	PoolSize int
	// CompilationCacheDir keeps compiled wasm on disk. Default: a toolq
	// folder in the user cache directory; "-" disables the disk cache.
	CompilationCacheDir string
	// Wasm overrides the embedded quickjs.wasm (tests of foreign builds).
	Wasm []byte
	// Observer is told of the VM pool and of snapshot restores, for metrics
	// (package metrics has the Prometheus one); nil for none, at no cost.
	Observer Observer

	// runtime overrides the guest runtime (prelude.js): tests of snapshots
	// made by an older one.
	runtime string
}

// Observer receives the engine's figures. The sandbox names no metrics
// library. Its methods are called from the runs' goroutines at once, must
// be safe for that and must not block.
type Observer interface {
	// VMPool is told the pool's counts after each change: idle VMs kept
	// warm, and VMs running a run (Exec or Resume) now. Calls come in the
	// order of the changes, so the last one is the pool as it is.
	VMPool(idle, inUse int)
	// Restored is told that a resume restored a VM from a snapshot, and how
	// long that took from the resume's start (verifying and decompressing
	// the snapshot, checking the settlements, taking a VM from the pool and
	// writing the snapshot's changed chunks into it). A refused snapshot is
	// not a restore.
	Restored(took time.Duration)
}

// SnapshotKey is a snapshot-verification key and its id.
type SnapshotKey = snapshot.Key

// DefaultSnapshotKeyID is the id a key gets when none is given.
func DefaultSnapshotKeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return "k-" + hex.EncodeToString(sum[:6])
}

// Engine runs code-mode programs. One Engine per process: it holds the
// compiled module, the clean post-init image and the pool of warm VMs. It is
// safe for concurrent use.
type Engine struct {
	rt       *engine.Runtime
	pool     *engine.Pool
	codec    *snapshot.Codec
	limits   Limits
	maxMem   int64
	stack    uint32
	obs      Observer
	install  engine.Value
	start    engine.Value
	closeMu  sync.Mutex
	isClosed bool
}

// NewEngine loads and compiles quickjs.wasm and builds the post-init image.
// Without the wasm file it fails with runtime_unavailable.
func NewEngine(ctx context.Context, cfg *EngineConfig) (*Engine, error) {
	if cfg == nil {
		cfg = &EngineConfig{}
	}
	if len(cfg.SnapshotKey) < 32 {
		return nil, errors.New("sandbox: EngineConfig.SnapshotKey must hold at least 32 bytes")
	}
	e := &Engine{limits: withDefaults(cfg.Limits, DefaultLimits()), obs: cfg.Observer}
	e.maxMem = cfg.MaxMemoryLimitBytes
	if e.maxMem <= 0 {
		e.maxMem = e.limits.MemoryLimitBytes
	}
	if e.maxMem > 1<<30 {
		return nil, errors.New("sandbox: MaxMemoryLimitBytes exceeds 1 GiB")
	}
	if e.limits.MemoryLimitBytes > e.maxMem {
		return nil, fmt.Errorf("sandbox: Limits.MemoryLimitBytes %d exceeds MaxMemoryLimitBytes %d", e.limits.MemoryLimitBytes, e.maxMem)
	}
	stack := cfg.StackSizeBytes
	if stack <= 0 {
		stack = 256 << 10
	}
	if stack > 512<<10 {
		return nil, errors.New("sandbox: StackSizeBytes exceeds 512 KiB")
	}
	e.stack = uint32(stack)
	wasm := cfg.Wasm
	if wasm == nil {
		var err error
		if wasm, err = engine.EmbeddedWasm(); err != nil {
			return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "code mode runtime unavailable: %v", err)
		}
	}
	guest := prelude
	if cfg.runtime != "" {
		guest = cfg.runtime
	}
	cacheDir := cfg.CompilationCacheDir
	switch cacheDir {
	case "":
		if d, err := os.UserCacheDir(); err == nil {
			cacheDir = filepath.Join(d, "toolq", "wazero")
		}
	case "-":
		cacheDir = ""
	}
	pages := uint32((e.maxMem*5/2 + 2<<20 + engine.PageSize - 1) / engine.PageSize) //nolint:gosec // G115: maxMem is checked above to be in (0, 1 GiB], so this is under 41k pages
	rt, err := engine.New(ctx, engine.Config{
		Wasm:                wasm,
		CompilationCacheDir: cacheDir,
		MemoryLimitPages:    pages,
		Setup:               setupImage(guest),
		GCThreshold:         gcThreshold,
	})
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "code mode runtime unavailable: %v", err)
	}
	e.rt = rt
	e.install, e.start = rt.Roots[0], rt.Roots[1]
	keyID := cfg.SnapshotKeyID
	if keyID == "" {
		keyID = DefaultSnapshotKeyID(cfg.SnapshotKey)
	}
	verify := make([]SnapshotKey, 0, len(cfg.SnapshotVerifyKeys))
	for _, k := range cfg.SnapshotVerifyKeys {
		if k.ID == "" {
			k.ID = DefaultSnapshotKeyID(k.Key)
		}
		verify = append(verify, k)
	}
	e.codec, err = snapshot.NewCodec(SnapshotKey{ID: keyID, Key: cfg.SnapshotKey}, verify, rt.WasmSHA256, rt.ImageSHA256, rt.Image(), int(pages)*engine.PageSize)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, err
	}
	size := cfg.PoolSize
	if size <= 0 {
		size = 2 * runtime.GOMAXPROCS(0)
	}
	var observe func(idle, inUse int)
	if e.obs != nil {
		observe = e.obs.VMPool
	}
	e.pool = engine.NewPool(rt, size, observe)
	return e, nil
}

// gcThreshold lets a run allocate a few MiB before QuickJS first collects:
// the image sits close to the default threshold, so every run would
// otherwise pay a full collection within its first allocations.
var gcThreshold uint32 = 4 << 20

// setupImage evaluates the guest runtime in the image VM and keeps its
// install and start functions. The image, and so its digest in every
// snapshot's header, changes with the guest runtime: a snapshot made under
// another prelude.js is refused as a foreign build.
func setupImage(guest string) func(ctx context.Context, vm *engine.VM) ([]engine.Value, error) {
	return func(ctx context.Context, vm *engine.VM) ([]engine.Value, error) {
		return evalRuntime(ctx, vm, guest)
	}
}

func evalRuntime(ctx context.Context, vm *engine.VM, guest string) ([]engine.Value, error) {
	host, err := vm.NewHostFunction(ctx, hostFunctionName, 2)
	if err != nil {
		return nil, err
	}
	defer vm.Free(ctx, host)
	factory, err := vm.Eval(ctx, guest, "toolq:runtime", 0)
	if err != nil {
		return nil, fmt.Errorf("evaluate guest runtime: %w", err)
	}
	defer vm.Free(ctx, factory)
	undef, err := vm.Undefined(ctx)
	if err != nil {
		return nil, err
	}
	defer vm.Free(ctx, undef)
	obj, err := vm.Call(ctx, factory, undef, host)
	if err != nil {
		return nil, fmt.Errorf("start guest runtime: %w", err)
	}
	defer vm.Free(ctx, obj)
	install, err := vm.GetProp(ctx, obj, "install")
	if err != nil {
		return nil, err
	}
	start, err := vm.GetProp(ctx, obj, "start")
	if err != nil {
		return nil, err
	}
	return []engine.Value{install, start}, nil
}

// Warm fills the pool with n VMs ahead of demand.
func (e *Engine) Warm(ctx context.Context, n int) error { return e.pool.Warm(ctx, n) }

// Close releases the engine. Runs in flight must have returned.
func (e *Engine) Close(ctx context.Context) error {
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	if e.isClosed {
		return nil
	}
	e.isClosed = true
	e.pool.Close(ctx)
	e.codec.Close()
	return e.rt.Close(ctx)
}

// Limits returns the engine's default limits.
func (e *Engine) Limits() Limits { return e.limits }

// SnapshotKeyID returns the id of the key the engine signs snapshots with.
func (e *Engine) SnapshotKeyID() string { return e.codec.SigningKeyID() }

// WasmSHA256 returns the digest of the engine's quickjs.wasm.
func (e *Engine) WasmSHA256() [32]byte { return e.rt.WasmSHA256 }
