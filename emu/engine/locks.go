package engine

import (
	"sync"
	"sync/atomic"

	"github.com/softirdma/softirdma/internal/names"
)

// The engine's lock order. A goroutine that holds one of these locks takes only locks further
// down the list, never one higher up or a second of the same kind (two QPs' locks, say, are
// never held together):
//
//  1. QP.mu: a QP's state, queues, requester, responder and completer.
//  2. Device.mu: the QPs by number and changes to the multicast groups.
//  3. Device.tab: the object tables (key space, MRs, windows, PDs, CQs and SRQs by number).
//  4. SRQ.mu: a shared receive queue.
//  5. CQ.mu: a completion queue's ring and its notification.
//  6. MR.pins: copies under way over an MR's memory (read), deregistration draining them.
//  7. Device.atomics: remote atomic operations of all the device's QPs, on memory pinned.
//  8. GuestMemory.mu: the regions of a guest's address space.
//  9. loopback.mu: frames a device sends itself, waiting for Receive.
//  10. asyncEvents.mu: asynchronous events waiting for their handler.
//  11. outbox.mu: frames, events and calls waiting to leave once the engine's locks are free.
//
// Two places run holding none of them: MR.drain, which waits for copies under way (whose goroutines
// may hold their QP's lock), and Device.flush, which sends frames and calls handlers that may
// call back into the device.
//
// The order is checked, not only written: each of these locks is a mutex or rwMutex with its
// rank as type argument. In an ordinary build they are sync.Mutex and sync.RWMutex and cost
// nothing more; built with the tag lockcheck, each goroutine's held ranks are recorded and taking
// a lock out of order panics, naming both locks. `make test` runs the engine's tests and its
// users' that way (after a run without the check: the check's bookkeeping, shared by every
// goroutine, would hide races from the race detector):
//
//	go test -race -tags lockcheck ./emu/... ./hw/...

// lockRank is a lock's place in the engine's lock order: a goroutine takes locks in increasing
// rank only.
type lockRank uint8

const (
	rankQP lockRank = iota + 1
	rankDevice
	rankTables
	rankSRQ
	rankCQ
	rankPins
	rankAtomics
	rankGuestMemory
	rankLoopback
	rankAsync
	rankOutbox
)

var lockRankNames = [...]string{rankQP: "QP.mu", rankDevice: "Device.mu", rankTables: "Device.tab",
	rankSRQ: "SRQ.mu", rankCQ: "CQ.mu", rankAtomics: "Device.atomics", rankPins: "MR.pins",
	rankGuestMemory: "GuestMemory.mu", rankLoopback: "loopback.mu", rankAsync: "asyncEvents.mu",
	rankOutbox: "outbox.mu"}

func (r lockRank) String() string { return names.In(lockRankNames[:], r, "lock rank %d") }

// ranked is a lock's kind: a type argument of mutex and rwMutex that names the lock's rank.
type ranked interface{ rank() lockRank }

type (
	qpLock          struct{}
	deviceLock      struct{}
	tablesLock      struct{}
	srqLock         struct{}
	cqLock          struct{}
	atomicsLock     struct{}
	pinsLock        struct{}
	guestMemoryLock struct{}
	loopbackLock    struct{}
	asyncLock       struct{}
	outboxLock      struct{}
)

func (qpLock) rank() lockRank          { return rankQP }
func (deviceLock) rank() lockRank      { return rankDevice }
func (tablesLock) rank() lockRank      { return rankTables }
func (srqLock) rank() lockRank         { return rankSRQ }
func (cqLock) rank() lockRank          { return rankCQ }
func (atomicsLock) rank() lockRank     { return rankAtomics }
func (pinsLock) rank() lockRank        { return rankPins }
func (guestMemoryLock) rank() lockRank { return rankGuestMemory }
func (loopbackLock) rank() lockRank    { return rankLoopback }
func (asyncLock) rank() lockRank       { return rankAsync }
func (outboxLock) rank() lockRank      { return rankOutbox }

// held is a lock of the engine taken by a verb, a receive or a timer, which ends by releasing
// it and then carrying out what the outbox gathered meanwhile: written
//
//	defer hold(d, &d.tab).release()
//
// it takes the lock at once and, on return, releases it before the flush, in the one order
// every entry into the engine ends in.
type held[L sync.Locker] struct {
	lock L
	dev  *Device
}

// hold takes l, a lock of d's.
func hold[L sync.Locker](d *Device, l L) held[L] {
	l.Lock()
	return held[L]{l, d}
}

// release releases the lock and carries out the outbox, handing its frames to the clock.
func (h held[L]) release() {
	h.lock.Unlock()
	h.dev.flush()
}

// releaseOnClock is release for a call the device's clock runs, which carries frames out itself.
func (h held[L]) releaseOnClock() {
	h.lock.Unlock()
	h.dev.flushAll()
}

// tables is the tables lock (Device.tab), with a generation that every holder but a lookup
// moves on when it takes it: a lookup's result kept for later packets is good while the
// generation has not moved, since everything that changes the key space holds this lock.
type tables struct {
	mutex[tablesLock]
	gen atomic.Uint64
}

// Lock takes the lock for a holder that may change the tables.
func (t *tables) Lock() {
	t.mutex.Lock()
	t.gen.Add(1)
}

// lookupLock takes the lock for a lookup, which changes nothing.
func (t *tables) lookupLock() { t.mutex.Lock() }
