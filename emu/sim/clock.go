// Package sim is the deterministic simulator the engine runs on in tests: Sim, a virtual clock
// whose events run one at a time in a fixed order, and Fabric, an in-memory network of devices
// with latency, rate, seeded loss, duplication, reordering, corruption, targeted faults and a
// pcap of everything on it in virtual time. A seed makes a run repeat exactly.
package sim

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
)

// Sim is the simulator's clock and event loop: a virtual clock that jumps from event to event,
// so an ACK timeout of seconds costs no wall-clock time. Everything scheduled on it runs on the
// goroutine that calls Step, RunUntilIdle or RunFor, one event at a time, in a fixed order: by
// time, then by the order they were scheduled. That order and a seeded random source make a run
// repeat exactly.
type Sim struct {
	mu  sync.Mutex
	now time.Duration
	// nowAt is now for Now, which the engine asks for on every ACK: an atomic load rather
	// than the lock. It changes only with now, under the lock.
	nowAt  atomic.Int64
	seq    uint64
	events eventHeap
	steps  uint64
	free   []*simEvent // events of Post, to reuse
}

// NewSim returns a simulator clock at time zero.
func NewSim() *Sim { return &Sim{} }

// Now is the virtual time.
func (s *Sim) Now() time.Duration { return time.Duration(s.nowAt.Load()) }

// setNow moves the clock; s.mu is held.
func (s *Sim) setNow(t time.Duration) {
	if t != s.now { // most events run at the time of the one before; a store is a barrier
		s.now = t
		s.nowAt.Store(int64(t))
	}
}

// AfterFunc schedules f at Now()+d. A negative d counts as zero.
func (s *Sim) AfterFunc(d time.Duration, f func()) engine.Timer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d < 0 {
		d = 0
	}
	s.seq++
	ev := &simEvent{at: s.now + d, seq: s.seq, f: f, sim: s}
	s.events.push(ev)
	return ev
}

// Post schedules f at Now()+d with a recycled event.
func (s *Sim) Post(d time.Duration, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d = max(d, 0)
	var ev *simEvent
	if n := len(s.free); n > 0 {
		ev = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		ev = &simEvent{sim: s, pooled: true}
	}
	s.seq++
	ev.at, ev.seq, ev.f = s.now+d, s.seq, f
	s.events.push(ev)
}

// Step runs the next event and reports whether there was one.
func (s *Sim) Step() bool {
	s.mu.Lock()
	if len(s.events) == 0 {
		s.mu.Unlock()
		return false
	}
	ev := s.events.pop()
	s.setNow(ev.at)
	s.steps++
	f := ev.f
	ev.f = nil
	if ev.reusable {
		ev.f = ev.fn
	}
	if ev.pooled {
		s.free = append(s.free, ev)
	}
	s.mu.Unlock()
	f()
	return true
}

// RunUntilIdle runs events until none is left, or until maxSteps have run (0: no limit). It
// returns the number of events run.
func (s *Sim) RunUntilIdle(maxSteps int) int {
	n := 0
	for (maxSteps == 0 || n < maxSteps) && s.Step() {
		n++
	}
	return n
}

// RunUntil runs events until cond holds (checked before each event) or none is left, and
// reports whether cond held.
func (s *Sim) RunUntil(cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		if !s.Step() {
			return cond()
		}
	}
}

// RunFor runs every event due within d from now, then sets the clock to now+d.
func (s *Sim) RunFor(d time.Duration) {
	end := s.Now() + d
	for {
		s.mu.Lock()
		if len(s.events) == 0 || s.events[0].at > end {
			s.setNow(max(s.now, end))
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.Step()
	}
}

// Pending is the number of scheduled events.
func (s *Sim) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events)
}

// Steps is the number of events run so far.
func (s *Sim) Steps() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steps
}

type simEvent struct {
	at     time.Duration
	seq    uint64
	index  int
	f      func()
	sim    *Sim
	pooled bool // made by Post: no Timer refers to it, so it is reused
	// A timer from NewTimer keeps its function in fn and is rescheduled by Reset.
	fn       func()
	reusable bool
}

func (e *simEvent) Stop() bool {
	s := e.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.f == nil || e.index < 0 {
		return false
	}
	s.events.remove(e.index)
	e.index = -1
	if !e.reusable {
		e.f = nil
	}
	return true
}

// Reset schedules the timer's call d from now.
func (e *simEvent) Reset(d time.Duration) bool {
	s := e.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	pending := e.index >= 0
	if pending {
		s.events.remove(e.index)
	}
	if e.f == nil {
		e.f = e.fn
	}
	s.seq++
	e.at, e.seq = s.now+max(d, 0), s.seq
	s.events.push(e)
	return pending
}

// NewTimer makes a stopped, reusable timer.
func (s *Sim) NewTimer(f func()) engine.Timer {
	return &simEvent{sim: s, index: -1, fn: f, reusable: true}
}

// eventHeap orders the simulator's events by time, then by scheduling. It is written out for
// *simEvent rather than through container/heap: the simulator runs a few events per frame, and
// the interface calls were a tenth of a small WRITE's cost.
type eventHeap []*simEvent

func (h eventHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h eventHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *eventHeap) push(e *simEvent) {
	e.index = len(*h)
	*h = append(*h, e)
	h.up(e.index)
}

func (h *eventHeap) pop() *simEvent {
	return h.remove(0)
}

func (h *eventHeap) remove(i int) *simEvent {
	old := *h
	n := len(old) - 1
	if i != n {
		old.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	e := old[n]
	old[n] = nil
	e.index = -1
	*h = old[:n]
	return e
}

func (h eventHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			return
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts element i down among the first n and reports whether it moved.
func (h eventHeap) down(i0, n int) bool {
	i := i0
	for {
		j := 2*i + 1
		if j >= n || j < 0 {
			break
		}
		if j2 := j + 1; j2 < n && h.less(j2, j) {
			j = j2
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
