package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

// Value is the address of an 8-byte JSValue box in linear memory. A Value
// returned by a VM method is owned by the caller (Free it); methods never
// consume their arguments.
type Value uint32

// ErrDead reports a VM that trapped or was closed; it is never reused.
var ErrDead = errors.New("quickjs vm is dead")

// TrapError is a wasm trap (an upstream assertion, a wasm stack overflow, a
// failed memory access). The VM that raised it is dead.
type TrapError struct{ Err error }

func (e *TrapError) Error() string { return "quickjs vm trapped: " + e.Err.Error() }
func (e *TrapError) Unwrap() error { return e.Err }

// JSError is a JavaScript exception caught by the host.
type JSError struct {
	Name        string
	Message     string
	Stack       string
	Uncatchable bool // interrupts and out-of-memory
}

func (e *JSError) Error() string {
	if e.Name == "" {
		return e.Message
	}
	if e.Message == "" {
		return e.Name
	}
	return e.Name + ": " + e.Message
}

// Handler serves the host imports of one VM.
type Handler interface {
	// HostCall serves a call of a host function created with
	// NewHostFunction. It returns a new value (the VM takes ownership), or an
	// error that is thrown into the guest as a plain Error.
	HostCall(ctx context.Context, vm *VM, name string, this Value, args []Value) (Value, error)
	// Interrupt reports whether the running JavaScript must stop.
	Interrupt(ctx context.Context) bool
}

type vmKey struct{}

// VM is one module instance. It is not safe for concurrent use.
type VM struct {
	rt      *Runtime
	mod     api.Module
	sp      api.MutableGlobal
	fn      exports
	handler Handler
	scratch uint32
	dead    bool
	closed  bool
}

type exports struct {
	init, init2, malloc, free, eval, isException, getException, isUncatchable,
	dupValue, freeValue, getFloat64, getStringLen, freeCString, newString,
	getUndefined, getGlobal, getPropString, setPropString, call,
	newHostFunction, newPromise, isJobPending, executePendingJob, throw,
	newError, setMemoryLimit, setMaxStackSize, setInterruptHandler,
	getAllocatedSize, runGC, getRuntimePtr, getContextPtr,
	setRuntimeAndContext, isObject, isString, setGCThreshold, getGCThreshold api.Function
}

func newVM(rt *Runtime, mod api.Module) (*VM, error) {
	vm := &VM{rt: rt, mod: mod}
	g, ok := mod.ExportedGlobal("__stack_pointer").(api.MutableGlobal)
	if !ok {
		return nil, errors.New("quickjs.wasm exports no mutable __stack_pointer")
	}
	vm.sp = g
	var missing []string
	get := func(name string) api.Function {
		f := mod.ExportedFunction(name)
		if f == nil {
			missing = append(missing, name)
		}
		return f
	}
	vm.fn = exports{
		init: get("qjs_init"), init2: get("qjs_init2"), malloc: get("wasm_malloc"), free: get("wasm_free"),
		eval: get("qjs_eval"), isException: get("qjs_is_exception"), getException: get("qjs_get_exception"),
		isUncatchable: get("qjs_is_uncatchable_error"), dupValue: get("qjs_dup_value"),
		freeValue: get("qjs_free_value"), getFloat64: get("qjs_get_float64"),
		getStringLen: get("qjs_get_string_len"), freeCString: get("qjs_free_cstring"),
		newString: get("qjs_new_string"), getUndefined: get("qjs_get_undefined"),
		getGlobal: get("qjs_get_global"), getPropString: get("qjs_get_prop_string"),
		setPropString: get("qjs_set_prop_string"), call: get("qjs_call"),
		newHostFunction: get("qjs_new_host_function"), newPromise: get("qjs_new_promise"),
		isJobPending: get("qjs_is_job_pending"), executePendingJob: get("qjs_execute_pending_job"),
		throw: get("qjs_throw"), newError: get("qjs_new_error"), setMemoryLimit: get("qjs_set_memory_limit"),
		setMaxStackSize: get("qjs_set_max_stack_size"), setInterruptHandler: get("qjs_set_interrupt_handler"),
		getAllocatedSize: get("qjs_get_allocated_size"), runGC: get("qjs_run_gc"),
		getRuntimePtr: get("qjs_get_runtime_ptr"), getContextPtr: get("qjs_get_context_ptr"),
		setRuntimeAndContext: get("qjs_set_runtime_and_context"), isObject: get("qjs_is_object"),
		isString: get("qjs_is_string"), setGCThreshold: get("qjs_set_gc_threshold"),
		getGCThreshold: get("qjs_get_gc_threshold"),
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("quickjs.wasm lacks exports %s", strings.Join(missing, ", "))
	}
	return vm, nil
}

// Context returns ctx carrying vm, as host imports need it. Every method
// does this itself; it is exported for callers that invoke raw functions.
func (vm *VM) Context(ctx context.Context) context.Context {
	if v, _ := ctx.Value(vmKey{}).(*VM); v == vm {
		return ctx
	}
	return context.WithValue(ctx, vmKey{}, vm)
}

// SetHandler installs the handler of host imports.
func (vm *VM) SetHandler(h Handler) { vm.handler = h }

// Dead reports whether the VM trapped or was closed.
func (vm *VM) Dead() bool { return vm.dead }

// Kill marks the VM as dead so that it is never reused.
func (vm *VM) Kill() { vm.dead = true }

// Close releases the instance.
func (vm *VM) Close(ctx context.Context) {
	if vm.closed {
		return
	}
	vm.closed = true
	vm.dead = true
	_ = vm.mod.Close(ctx)
}

func (vm *VM) call(ctx context.Context, f api.Function, args ...uint64) ([]uint64, error) {
	if vm.dead {
		return nil, ErrDead
	}
	n := len(f.Definition().ParamTypes())
	if r := len(f.Definition().ResultTypes()); r > n {
		n = r
	}
	stack := make([]uint64, n)
	copy(stack, args)
	if err := f.CallWithStack(vm.Context(ctx), stack); err != nil {
		vm.dead = true
		return nil, &TrapError{Err: err}
	}
	return stack, nil
}

func (vm *VM) call1(ctx context.Context, f api.Function, args ...uint64) (uint64, error) {
	s, err := vm.call(ctx, f, args...)
	if err != nil {
		return 0, err
	}
	if len(s) == 0 {
		return 0, nil
	}
	return s[0], nil
}

// value wraps a returned box: a null box or an exception box becomes an
// error carrying the pending exception.
func (vm *VM) value(ctx context.Context, box uint64) (Value, error) {
	if box == 0 {
		return 0, vm.takeException(ctx)
	}
	exc, err := vm.call1(ctx, vm.fn.isException, box)
	if err != nil {
		return 0, err
	}
	if exc != 0 {
		vm.Free(ctx, Value(box))
		return 0, vm.takeException(ctx)
	}
	return Value(box), nil
}

func (vm *VM) takeException(ctx context.Context) error {
	exc, err := vm.call1(ctx, vm.fn.getException)
	if err != nil {
		return err
	}
	if exc == 0 {
		return &JSError{Name: "InternalError", Message: "unknown exception"}
	}
	defer vm.Free(ctx, Value(exc))
	return vm.describeError(ctx, Value(exc))
}

func (vm *VM) describeError(ctx context.Context, v Value) error {
	je := &JSError{}
	u, err := vm.call1(ctx, vm.fn.isUncatchable, uint64(v))
	if err != nil {
		return err
	}
	je.Uncatchable = u != 0
	isObj, err := vm.IsObject(ctx, v)
	if err != nil {
		return err
	}
	if isObj {
		for _, f := range []struct {
			name string
			dst  *string
		}{{"name", &je.Name}, {"message", &je.Message}, {"stack", &je.Stack}} {
			p, err := vm.GetProp(ctx, v, f.name)
			if err != nil {
				var trap *TrapError
				if errors.As(err, &trap) {
					return err
				}
				continue
			}
			if ok, _ := vm.IsString(ctx, p); ok {
				*f.dst, _ = vm.String(ctx, p)
			}
			vm.Free(ctx, p)
		}
		if je.Name != "" || je.Message != "" {
			return je
		}
	}
	s, err := vm.String(ctx, v)
	if err != nil {
		var trap *TrapError
		if errors.As(err, &trap) {
			return err
		}
		s = "exception"
	}
	je.Message = s
	return je
}

// Free releases a value box.
func (vm *VM) Free(ctx context.Context, v Value) {
	if v == 0 || vm.dead {
		return
	}
	_, _ = vm.call(ctx, vm.fn.freeValue, uint64(v))
}

// Dup returns a new box holding the same value.
func (vm *VM) Dup(ctx context.Context, v Value) (Value, error) {
	b, err := vm.call1(ctx, vm.fn.dupValue, uint64(v))
	return Value(b), err
}

func (vm *VM) malloc(ctx context.Context, n int) (uint32, error) {
	if n < 0 || n > math.MaxUint32 {
		return 0, &JSError{Name: "InternalError", Message: "out of memory", Uncatchable: true}
	}
	p, err := vm.call1(ctx, vm.fn.malloc, uint64(n))
	if err != nil {
		return 0, err
	}
	if p == 0 {
		return 0, &JSError{Name: "InternalError", Message: "out of memory", Uncatchable: true}
	}
	return uint32(p), nil
}

func (vm *VM) freePtr(ctx context.Context, p uint32) {
	if p != 0 && !vm.dead {
		_, _ = vm.call(ctx, vm.fn.free, uint64(p))
	}
}

// writeCString copies s with a trailing NUL into fresh guest memory.
func (vm *VM) writeCString(ctx context.Context, s string) (uint32, error) {
	p, err := vm.malloc(ctx, len(s)+1)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, len(s)+1)
	copy(buf, s)
	if !vm.mod.Memory().Write(p, buf) {
		vm.freePtr(ctx, p)
		return 0, errors.New("write guest memory")
	}
	return p, nil
}

// Eval evaluates a script and returns its completion value.
func (vm *VM) Eval(ctx context.Context, code, filename string, flags uint32) (Value, error) {
	cp, err := vm.writeCString(ctx, code)
	if err != nil {
		return 0, err
	}
	defer vm.freePtr(ctx, cp)
	fp, err := vm.writeCString(ctx, filename)
	if err != nil {
		return 0, err
	}
	defer vm.freePtr(ctx, fp)
	box, err := vm.call1(ctx, vm.fn.eval, uint64(cp), uint64(len(code)), uint64(fp), uint64(flags))
	if err != nil {
		return 0, err
	}
	return vm.value(ctx, box)
}

// NewString returns a JavaScript string. s is read as WTF-8.
func (vm *VM) NewString(ctx context.Context, s string) (Value, error) {
	p, err := vm.writeCString(ctx, s)
	if err != nil {
		return 0, err
	}
	defer vm.freePtr(ctx, p)
	box, err := vm.call1(ctx, vm.fn.newString, uint64(p), uint64(len(s)))
	if err != nil {
		return 0, err
	}
	return vm.value(ctx, box)
}

// String converts v to a string (running guest code for objects). The result
// is WTF-8: lone surrogates come out as their 3-byte encodings.
func (vm *VM) String(ctx context.Context, v Value) (string, error) {
	cs, err := vm.call1(ctx, vm.fn.getStringLen, uint64(v), uint64(vm.scratch))
	if err != nil {
		return "", err
	}
	if cs == 0 {
		return "", vm.takeException(ctx)
	}
	defer func() { _, _ = vm.call(ctx, vm.fn.freeCString, cs) }()
	mem := vm.mod.Memory()
	n, ok := mem.ReadUint32Le(vm.scratch)
	if !ok {
		return "", errors.New("read string length")
	}
	b, ok := mem.Read(uint32(cs), n)
	if !ok {
		return "", errors.New("read string")
	}
	return string(b), nil
}

// IsObject reports whether v is an object (functions included).
func (vm *VM) IsObject(ctx context.Context, v Value) (bool, error) {
	r, err := vm.call1(ctx, vm.fn.isObject, uint64(v))
	return r != 0, err
}

// IsString reports whether v is a string.
func (vm *VM) IsString(ctx context.Context, v Value) (bool, error) {
	r, err := vm.call1(ctx, vm.fn.isString, uint64(v))
	return r != 0, err
}

// Float64 returns the number held by v.
func (vm *VM) Float64(ctx context.Context, v Value) (float64, error) {
	r, err := vm.call1(ctx, vm.fn.getFloat64, uint64(v))
	return api.DecodeF64(r), err
}

// Undefined returns a new box holding undefined.
func (vm *VM) Undefined(ctx context.Context) (Value, error) {
	b, err := vm.call1(ctx, vm.fn.getUndefined)
	return Value(b), err
}

// Global returns the global object.
func (vm *VM) Global(ctx context.Context) (Value, error) {
	b, err := vm.call1(ctx, vm.fn.getGlobal)
	return Value(b), err
}

// GetProp reads obj[name].
func (vm *VM) GetProp(ctx context.Context, obj Value, name string) (Value, error) {
	p, err := vm.writeCString(ctx, name)
	if err != nil {
		return 0, err
	}
	defer vm.freePtr(ctx, p)
	box, err := vm.call1(ctx, vm.fn.getPropString, uint64(obj), uint64(p))
	if err != nil {
		return 0, err
	}
	return vm.value(ctx, box)
}

// SetProp sets obj[name] = v.
func (vm *VM) SetProp(ctx context.Context, obj Value, name string, v Value) error {
	p, err := vm.writeCString(ctx, name)
	if err != nil {
		return err
	}
	defer vm.freePtr(ctx, p)
	rc, err := vm.call1(ctx, vm.fn.setPropString, uint64(obj), uint64(p), uint64(v))
	if err != nil {
		return err
	}
	if int32(rc) < 0 {
		return vm.takeException(ctx)
	}
	return nil
}

// Call calls fn with this and args.
func (vm *VM) Call(ctx context.Context, fn, this Value, args ...Value) (Value, error) {
	var argv uint32
	if len(args) > 0 {
		p, err := vm.malloc(ctx, 4*len(args))
		if err != nil {
			return 0, err
		}
		defer vm.freePtr(ctx, p)
		buf := make([]byte, 4*len(args))
		for i, a := range args {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(a))
		}
		vm.mod.Memory().Write(p, buf)
		argv = p
	}
	box, err := vm.call1(ctx, vm.fn.call, uint64(fn), uint64(this), uint64(len(args)), uint64(argv))
	if err != nil {
		return 0, err
	}
	return vm.value(ctx, box)
}

// NewHostFunction returns a function that calls the handler with name.
func (vm *VM) NewHostFunction(ctx context.Context, name string, arity int) (Value, error) {
	if arity < 0 || arity > math.MaxInt32 {
		return 0, fmt.Errorf("host function %q: arity %d out of range", name, arity)
	}
	p, err := vm.writeCString(ctx, name)
	if err != nil {
		return 0, err
	}
	defer vm.freePtr(ctx, p)
	box, err := vm.call1(ctx, vm.fn.newHostFunction, uint64(p), uint64(len(name)), uint64(arity))
	if err != nil {
		return 0, err
	}
	return vm.value(ctx, box)
}

// NewPromise returns a pending promise and its resolving functions.
func (vm *VM) NewPromise(ctx context.Context) (promise, resolve, reject Value, err error) {
	box, err := vm.call1(ctx, vm.fn.newPromise, uint64(vm.scratch), uint64(vm.scratch+4))
	if err != nil {
		return 0, 0, 0, err
	}
	p, err := vm.value(ctx, box)
	if err != nil {
		return 0, 0, 0, err
	}
	mem := vm.mod.Memory()
	res, _ := mem.ReadUint32Le(vm.scratch)
	rej, _ := mem.ReadUint32Le(vm.scratch + 4)
	return p, Value(res), Value(rej), nil
}

// ThrowError throws a plain Error with msg into the guest; the host function
// that calls it must then return 0.
func (vm *VM) ThrowError(ctx context.Context, msg string) error {
	e, err := vm.call1(ctx, vm.fn.newError)
	if err != nil {
		return err
	}
	if e == 0 {
		return errors.New("new error")
	}
	defer vm.Free(ctx, Value(e))
	if m, err := vm.NewString(ctx, msg); err == nil {
		_ = vm.SetProp(ctx, Value(e), "message", m)
		vm.Free(ctx, m)
	}
	r, err := vm.call1(ctx, vm.fn.throw, e)
	if err != nil {
		return err
	}
	vm.Free(ctx, Value(r))
	return nil
}

// ExecutePendingJobs drains the job queue. An exception escaping a job (an
// interrupt, out of memory) is returned.
func (vm *VM) ExecutePendingJobs(ctx context.Context) error {
	for {
		p, err := vm.call1(ctx, vm.fn.isJobPending)
		if err != nil {
			return err
		}
		if p == 0 {
			return nil
		}
		rc, err := vm.call1(ctx, vm.fn.executePendingJob)
		if err != nil {
			return err
		}
		if int32(rc) < 0 {
			return vm.takeException(ctx)
		}
	}
}

// SetMemoryLimit sets the QuickJS heap limit in bytes.
func (vm *VM) SetMemoryLimit(ctx context.Context, n uint32) error {
	_, err := vm.call(ctx, vm.fn.setMemoryLimit, uint64(n))
	return err
}

// SetMaxStackSize sets the QuickJS stack limit in bytes (≤ 512 KiB).
func (vm *VM) SetMaxStackSize(ctx context.Context, n uint32) error {
	_, err := vm.call(ctx, vm.fn.setMaxStackSize, uint64(n))
	return err
}

// AllocatedSize returns the bytes the QuickJS heap holds.
func (vm *VM) AllocatedSize(ctx context.Context) (uint32, error) {
	r, err := vm.call1(ctx, vm.fn.getAllocatedSize)
	return uint32(r), err
}

// GCThreshold returns the heap size that triggers the next collection.
func (vm *VM) GCThreshold(ctx context.Context) (uint32, error) {
	r, err := vm.call1(ctx, vm.fn.getGCThreshold)
	return uint32(r), err
}

// SetGCThreshold sets the heap size that triggers the next collection.
func (vm *VM) SetGCThreshold(ctx context.Context, n uint32) error {
	_, err := vm.call(ctx, vm.fn.setGCThreshold, uint64(n))
	return err
}

// RunGC runs the QuickJS garbage collector.
func (vm *VM) RunGC(ctx context.Context) error {
	_, err := vm.call(ctx, vm.fn.runGC)
	return err
}

// Registers reads the machine state kept outside linear memory.
func (vm *VM) Registers(ctx context.Context) (Registers, error) {
	rp, err := vm.call1(ctx, vm.fn.getRuntimePtr)
	if err != nil {
		return Registers{}, err
	}
	cp, err := vm.call1(ctx, vm.fn.getContextPtr)
	if err != nil {
		return Registers{}, err
	}
	return Registers{StackPointer: uint32(vm.sp.Get()), RuntimePtr: uint32(rp), ContextPtr: uint32(cp)}, nil
}

// Memory returns a live view of linear memory; any call into the VM may
// invalidate it.
func (vm *VM) Memory() []byte {
	mem := vm.mod.Memory()
	b, _ := mem.Read(0, mem.Size())
	return b
}

// MemoryCopy returns a copy of linear memory.
func (vm *VM) MemoryCopy() []byte {
	return append([]byte(nil), vm.Memory()...)
}

// MemorySize returns the size of linear memory in bytes.
func (vm *VM) MemorySize() uint32 { return vm.mod.Memory().Size() }

func vmFrom(ctx context.Context) *VM {
	vm, _ := ctx.Value(vmKey{}).(*VM)
	return vm
}

func hostCall(ctx context.Context, mod api.Module, stack []uint64) {
	vm := vmFrom(ctx)
	namePtr, nameLen := uint32(stack[0]), uint32(stack[1])
	this, argc, argv := Value(stack[2]), uint32(stack[3]), uint32(stack[4])
	stack[0] = 0
	if vm == nil || vm.handler == nil {
		if vm != nil {
			_ = vm.ThrowError(ctx, "host function called outside a run")
		}
		return
	}
	mem := mod.Memory()
	nb, ok := mem.Read(namePtr, nameLen)
	if !ok {
		_ = vm.ThrowError(ctx, "bad host function name")
		return
	}
	name := string(nb)
	var args []Value
	if argc > 0 {
		if argc > 64 {
			argc = 64
		}
		raw, ok := mem.Read(argv, 4*argc)
		if !ok {
			_ = vm.ThrowError(ctx, "bad host call arguments")
			return
		}
		args = make([]Value, argc)
		for i := range args {
			args[i] = Value(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	v, err := vm.handler.HostCall(ctx, vm, name, this, args)
	if err != nil {
		if !vm.dead {
			_ = vm.ThrowError(ctx, err.Error())
		}
		return
	}
	stack[0] = uint64(v)
}

func hostInterrupt(ctx context.Context, _ api.Module, stack []uint64) {
	stack[0] = 0
	if vm := vmFrom(ctx); vm != nil && vm.handler != nil && vm.handler.Interrupt(ctx) {
		stack[0] = 1
	}
}

func hostPromiseRejection(ctx context.Context, _ api.Module, stack []uint64) {
	if vm := vmFrom(ctx); vm != nil {
		vm.Free(ctx, Value(stack[0]))
		vm.Free(ctx, Value(stack[1]))
	}
}

func hostRefuse(_ context.Context, _ api.Module, stack []uint64) { stack[0] = 0 }
