package engine

import (
	"context"
	"sync"
)

// Pool keeps warm VMs holding the clean post-init image. Get takes one or
// restores a new one; Put gives a healthy VM back, and the pool loads the
// image into it again off the caller's path (a goroutine of the pool's,
// or the next Get when it finds only such VMs). Safe for concurrent use.
type Pool struct {
	rt   *Runtime
	mu   sync.Mutex
	cond *sync.Cond // signalled when a reset ends
	// idle VMs hold the clean image; dirty ones wait for it to be loaded
	// again; resetting counts those being reloaded now. All three are
	// idle to the observer: they are kept, and a Get takes them.
	idle      []*VM
	dirty     []*VM
	resetting int
	inUse     int // VMs handed out by Get and not yet given back
	size      int
	closed    bool
	// wake tells the resetter that dirty VMs wait; done ends it.
	wake    chan struct{}
	done    chan struct{}
	started bool
	wg      sync.WaitGroup
	// observe, when set, is told the idle and in-use counts after every
	// change, under mu: the calls come in the order of the changes.
	observe func(idle, inUse int)
}

// NewPool returns a pool that keeps at most size idle VMs. observe, when
// not nil, is told the pool's idle and in-use counts after each change; it
// is called with the pool's lock held and must not block.
func NewPool(rt *Runtime, size int, observe func(idle, inUse int)) *Pool {
	p := &Pool{rt: rt, size: size, observe: observe, wake: make(chan struct{}, 1), done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// kept is the number of VMs the pool keeps; p.mu must be held.
func (p *Pool) kept() int { return len(p.idle) + len(p.dirty) + p.resetting }

// changed tells the observer the counts; p.mu must be held.
func (p *Pool) changed() {
	if p.observe != nil {
		p.observe(p.kept(), p.inUse)
	}
}

// Get returns a VM holding the clean image: an idle one, else one given
// back whose image it reloads now (or waits for the reload under way),
// else a new one.
func (p *Pool) Get(ctx context.Context) (*VM, error) {
	p.mu.Lock()
	for len(p.idle) == 0 && len(p.dirty) == 0 && p.resetting > 0 {
		p.cond.Wait() // a reset takes tens of microseconds
	}
	if n := len(p.idle); n > 0 {
		vm := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.inUse++
		p.changed()
		p.mu.Unlock()
		return vm, nil
	}
	if n := len(p.dirty); n > 0 {
		vm := p.dirty[n-1]
		p.dirty = p.dirty[:n-1]
		p.inUse++
		p.changed()
		p.mu.Unlock()
		if err := p.rt.Reset(ctx, vm); err == nil {
			return vm, nil
		}
		p.Discard(ctx, vm)
		return p.fresh(ctx)
	}
	p.mu.Unlock()
	return p.fresh(ctx)
}

// fresh restores a new VM from the image and counts it in use.
func (p *Pool) fresh(ctx context.Context) (*VM, error) {
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
// image, or one beyond the pool size is closed; any other is kept, and
// its image is loaded again before a Get hands it out.
func (p *Pool) Put(ctx context.Context, vm *VM) {
	if vm.Dead() || int(vm.MemorySize()) != len(p.rt.image) {
		p.Discard(ctx, vm)
		return
	}
	p.mu.Lock()
	p.inUse--
	if p.closed || p.kept() >= p.size {
		p.changed()
		p.mu.Unlock()
		vm.Close(ctx)
		return
	}
	vm.handler = nil
	p.dirty = append(p.dirty, vm)
	if !p.started {
		p.started = true
		p.wg.Add(1)
		go p.resetter() //nolint:gosec,contextcheck // G118: the resetter outlives the Put that starts it (Close ends it); it writes memory and runs no guest code
	}
	p.changed()
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default: // already told
	}
}

// resetter loads the image into VMs given back, until Close.
func (p *Pool) resetter() {
	defer p.wg.Done()
	// Reset runs no guest code: it writes memory and two registers, so it
	// needs no request's context.
	ctx := context.Background()
	for {
		select {
		case <-p.done:
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			n := len(p.dirty)
			if n == 0 || p.closed {
				p.mu.Unlock()
				break
			}
			vm := p.dirty[n-1]
			p.dirty = p.dirty[:n-1]
			p.resetting++
			p.mu.Unlock()
			err := p.rt.Reset(ctx, vm)
			p.mu.Lock()
			p.resetting--
			keep := err == nil && !p.closed
			if keep {
				p.idle = append(p.idle, vm)
			} else {
				p.changed()
			}
			p.cond.Broadcast()
			p.mu.Unlock()
			if !keep {
				vm.Close(ctx)
			}
		}
	}
}

// Discard closes a VM from Get instead of giving it back.
func (p *Pool) Discard(ctx context.Context, vm *VM) {
	p.mu.Lock()
	p.inUse--
	p.changed()
	p.mu.Unlock()
	vm.Close(ctx)
}

// Warm restores VMs until n are idle (at most the pool size).
func (p *Pool) Warm(ctx context.Context, n int) error {
	for {
		p.mu.Lock()
		enough := p.closed || p.kept() >= n || p.kept() >= p.size
		p.mu.Unlock()
		if enough {
			return nil
		}
		vm, err := p.rt.NewVM(ctx)
		if err != nil {
			return err
		}
		p.mu.Lock()
		if p.closed || p.kept() >= p.size {
			p.mu.Unlock()
			vm.Close(ctx)
			return nil
		}
		p.idle = append(p.idle, vm) // a new VM holds the image
		p.changed()
		p.mu.Unlock()
	}
}

// Idle returns the number of idle VMs (those whose image is being loaded
// again too).
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kept()
}

// InUse returns the number of VMs handed out and not yet given back.
func (p *Pool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inUse
}

// Close closes the idle VMs and ends the resetter; later Puts close their
// VM. Close may be called more than once.
func (p *Pool) Close(ctx context.Context) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	idle := append(p.idle, p.dirty...)
	p.idle, p.dirty = nil, nil
	p.closed = true
	p.changed()
	p.cond.Broadcast()
	p.mu.Unlock()
	close(p.done)
	p.wg.Wait()
	for _, vm := range idle {
		vm.Close(ctx)
	}
}
