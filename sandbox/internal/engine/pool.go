package engine

import (
	"context"
	"sync"
)

// Pool keeps warm VMs holding the clean post-init image. Get takes one or
// restores a new one; Put loads the image again into a healthy VM and keeps
// it, or closes it. Safe for concurrent use.
type Pool struct {
	rt     *Runtime
	mu     sync.Mutex
	idle   []*VM
	inUse  int // VMs handed out by Get and not yet given back
	size   int
	closed bool
	// observe, when set, is told the idle and in-use counts after every
	// change, under mu: the calls come in the order of the changes.
	observe func(idle, inUse int)
}

// NewPool returns a pool that keeps at most size idle VMs. observe, when
// not nil, is told the pool's idle and in-use counts after each change; it
// is called with the pool's lock held and must not block.
func NewPool(rt *Runtime, size int, observe func(idle, inUse int)) *Pool {
	return &Pool{rt: rt, size: size, observe: observe}
}

// changed tells the observer the counts; p.mu must be held.
func (p *Pool) changed() {
	if p.observe != nil {
		p.observe(len(p.idle), p.inUse)
	}
}

// Get returns a VM holding the clean image.
func (p *Pool) Get(ctx context.Context) (*VM, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		vm := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.inUse++
		p.changed()
		p.mu.Unlock()
		return vm, nil
	}
	p.mu.Unlock()
	vm, err := p.rt.NewVM(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.inUse++
	p.changed()
	p.mu.Unlock()
	return vm, nil
}

// Put gives back a VM from Get. A dead VM, one whose memory grew past the
// image, or one beyond the pool size is closed.
func (p *Pool) Put(ctx context.Context, vm *VM) {
	if vm.Dead() || p.full() || p.rt.Reset(ctx, vm) != nil {
		p.Discard(ctx, vm)
		return
	}
	p.mu.Lock()
	p.inUse--
	if p.closed || len(p.idle) >= p.size {
		p.changed()
		p.mu.Unlock()
		vm.Close(ctx)
		return
	}
	p.idle = append(p.idle, vm)
	p.changed()
	p.mu.Unlock()
}

// Discard closes a VM from Get instead of giving it back.
func (p *Pool) Discard(ctx context.Context, vm *VM) {
	p.mu.Lock()
	p.inUse--
	p.changed()
	p.mu.Unlock()
	vm.Close(ctx)
}

func (p *Pool) full() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed || len(p.idle) >= p.size
}

// Warm restores VMs until n are idle (at most the pool size).
func (p *Pool) Warm(ctx context.Context, n int) error {
	for {
		p.mu.Lock()
		enough := p.closed || len(p.idle) >= n || len(p.idle) >= p.size
		p.mu.Unlock()
		if enough {
			return nil
		}
		vm, err := p.rt.NewVM(ctx)
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.inUse++ // Put counts it back
		p.mu.Unlock()
		p.Put(ctx, vm)
	}
}

// Idle returns the number of idle VMs.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// InUse returns the number of VMs handed out and not yet given back.
func (p *Pool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inUse
}

// Close closes the idle VMs; later Puts close their VM.
func (p *Pool) Close(ctx context.Context) {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	p.changed()
	p.mu.Unlock()
	for _, vm := range idle {
		vm.Close(ctx)
	}
}
