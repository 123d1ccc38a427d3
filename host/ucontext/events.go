package ucontext

import (
	"sync"

	"github.com/softirdma/softirdma/emu/engine"
)

// An owner is the context and the program's user_handle of an engine object, by which the
// device's asynchronous events reach the program that made the object.
type ownerKey struct {
	kind uint8 // ownCQ, ownQP, ownSRQ
	num  uint32
}

const (
	ownCQ = iota + 1
	ownQP
	ownSRQ
)

type owner struct {
	c      *Context
	handle uint64
}

// owners routes the device's asynchronous events; Device embeds it.
type owners struct {
	once sync.Once
	mu   sync.Mutex
	by   map[ownerKey]owner
	ctxs map[*Context]struct{} // port events go to every context
}

func (d *Device) own(c *Context, kind uint8, num uint32, handle uint64) {
	d.owners.once.Do(func() { d.Engine.OnAsyncEvent(d.asyncEvent) })
	d.owners.mu.Lock()
	defer d.owners.mu.Unlock()
	if d.owners.by == nil {
		d.owners.by = map[ownerKey]owner{}
	}
	d.owners.by[ownerKey{kind, num}] = owner{c, handle}
}

// QPOf is the engine's QP numbered qpn if a program of owner's made it: rdma_cm's commands
// name a program's QP by its number, and reach no other program's.
func (d *Device) QPOf(qpn uint32, owner int) (*engine.QP, bool) {
	d.owners.mu.Lock()
	o, ok := d.owners.by[ownerKey{ownQP, qpn}]
	d.owners.mu.Unlock()
	if !ok || !o.c.heldBy(owner) {
		return nil, false
	}
	return d.Engine.QP(qpn)
}

func (d *Device) disown(kind uint8, num uint32) {
	d.owners.mu.Lock()
	defer d.owners.mu.Unlock()
	delete(d.owners.by, ownerKey{kind, num})
}

func (d *Device) joined(c *Context, in bool) {
	d.owners.once.Do(func() { d.Engine.OnAsyncEvent(d.asyncEvent) })
	d.owners.mu.Lock()
	defer d.owners.mu.Unlock()
	if d.owners.ctxs == nil {
		d.owners.ctxs = map[*Context]struct{}{}
	}
	if in {
		d.owners.ctxs[c] = struct{}{}
	} else {
		delete(d.owners.ctxs, c)
	}
}

// asyncEvent hands an engine event to the program whose object it is about: element is the
// object's user_handle, or the port number for the port's events (ib_uverbs_async_event_desc).
func (d *Device) asyncEvent(e engine.AsyncEvent) {
	var kind uint8
	switch e.Type {
	case engine.AsyncCQErr:
		kind = ownCQ
	case engine.AsyncSRQErr, engine.AsyncSRQLimitReached:
		kind = ownSRQ
	case engine.AsyncDeviceFatal, engine.AsyncPortActive, engine.AsyncPortErr:
		d.owners.mu.Lock()
		var all []*Context
		for c := range d.owners.ctxs {
			all = append(all, c)
		}
		d.owners.mu.Unlock()
		for _, c := range all {
			c.asyncEvent(engine.PortNum, uint32(e.Type))
		}
		return
	default:
		kind = ownQP
	}
	d.owners.mu.Lock()
	o, ok := d.owners.by[ownerKey{kind, e.Num}]
	d.owners.mu.Unlock()
	if ok {
		o.c.asyncEvent(o.handle, uint32(e.Type))
	}
}

// asyncEvent sends an event about an object (its user_handle) on the async event file.
func (c *Context) asyncEvent(element uint64, typ uint32) {
	ch := c.async.Load()
	if ch == nil {
		return
	}
	var ev [asyncEventSize]byte
	putU64(ev[:], element)
	putU32(ev[8:], typ)
	if ch.send(ev[:]) {
		c.asyncSentMu.Lock()
		c.asyncSent[element]++
		c.asyncSentMu.Unlock()
	}
}

// asyncReported is how many async events about element the program read: those sent, less
// those still queued, which are withdrawn (the kernel drops an object's events with it, and
// libibverbs waits for this count of acknowledgements).
func (c *Context) asyncReported(element uint64) uint32 {
	ch := c.async.Load()
	if ch == nil {
		return 0
	}
	unread := ch.withdraw(func(ev []byte) bool { return len(ev) >= 8 && getU64(ev) == element })
	c.asyncSentMu.Lock()
	defer c.asyncSentMu.Unlock()
	n := c.asyncSent[element] - uint32(unread)
	delete(c.asyncSent, element)
	return n
}

func getU64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
