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
	size   int
	closed bool
}

// NewPool returns a pool that keeps at most size idle VMs.
func NewPool(rt *Runtime, size int) *Pool { return &Pool{rt: rt, size: size} }

// Get returns a VM holding the clean image.
func (p *Pool) Get(ctx context.Context) (*VM, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		vm := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return vm, nil
	}
	p.mu.Unlock()
	return p.rt.NewVM(ctx)
}

// Put gives a VM back. A dead VM, one whose memory grew past the image, or
// one beyond the pool size is closed.
func (p *Pool) Put(ctx context.Context, vm *VM) {
	if vm.Dead() || p.full() || p.rt.Reset(ctx, vm) != nil {
		vm.Close(ctx)
		return
	}
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.size {
		p.mu.Unlock()
		vm.Close(ctx)
		return
	}
	p.idle = append(p.idle, vm)
	p.mu.Unlock()
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
		p.Put(ctx, vm)
	}
}

// Idle returns the number of idle VMs.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// Close closes the idle VMs; later Puts close their VM.
func (p *Pool) Close(ctx context.Context) {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	p.mu.Unlock()
	for _, vm := range idle {
		vm.Close(ctx)
	}
}
