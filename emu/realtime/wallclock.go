package realtime

import (
	"container/heap"
	"sync"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
)

// WallClock is real time for devices outside the simulator. Its calls run one at a time, in
// order of time and then of scheduling, on one goroutine of the clock's, which runs while
// anything is scheduled and ends when nothing is: a retransmission timer, a requester kick or a
// loopback delivery costs a heap entry, not a goroutine, and a device on a busy machine does not
// multiply its goroutines with its traffic.
type WallClock struct {
	start  time.Time
	mu     sync.Mutex
	seq    uint64
	events wallHeap
	// running says the clock's goroutine is up; wake tells it that an earlier call was
	// scheduled than the one it sleeps for.
	running bool
	wake    chan struct{}
}

// NewWallClock returns a clock whose epoch is now.
func NewWallClock() *WallClock {
	return &WallClock{start: time.Now(), wake: make(chan struct{}, 1)}
}

// Now is the time since the clock was made.
func (c *WallClock) Now() time.Duration { return time.Since(c.start) }

// AfterFunc runs f on the clock's goroutine after d.
func (c *WallClock) AfterFunc(d time.Duration, f func()) engine.Timer {
	t := &wallTimer{clock: c, index: -1, fn: f}
	t.Reset(d)
	return t
}

// Post runs f on the clock's goroutine after d.
func (c *WallClock) Post(d time.Duration, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.schedule(&wallTimer{clock: c, index: -1, fn: f}, d)
}

// NewTimer makes a stopped timer that runs f on the clock's goroutine.
func (c *WallClock) NewTimer(f func()) engine.Timer { return &wallTimer{clock: c, index: -1, fn: f} }

// schedule puts t in the heap d from now and makes sure the goroutine will run it in time.
func (c *WallClock) schedule(t *wallTimer, d time.Duration) {
	c.seq++
	t.at, t.seq = c.Now()+max(d, 0), c.seq
	heap.Push(&c.events, t)
	switch {
	case !c.running:
		c.running = true
		go c.loop()
	case c.events[0] == t:
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// loop runs the calls that are due, sleeps until the next one, and ends when none is left.
func (c *WallClock) loop() {
	sleep := time.NewTimer(time.Hour)
	defer sleep.Stop()
	for {
		c.mu.Lock()
		if len(c.events) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		t := c.events[0]
		if wait := t.at - c.Now(); wait > 0 {
			c.mu.Unlock()
			sleep.Reset(wait)
			select {
			case <-sleep.C:
			case <-c.wake: // Reset above discards the pending expiry (Go 1.23 timers)
			}
			continue
		}
		heap.Pop(&c.events)
		c.mu.Unlock()
		t.fn()
	}
}

// wallTimer is a call scheduled on a WallClock.
type wallTimer struct {
	clock *WallClock
	at    time.Duration
	seq   uint64
	index int // in the heap; -1 when not scheduled
	fn    func()
}

func (t *wallTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&c.events, t.index)
	return true
}

func (t *wallTimer) Reset(d time.Duration) bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	pending := t.index >= 0
	if pending {
		heap.Remove(&c.events, t.index)
	}
	c.schedule(t, d)
	return pending
}

type wallHeap []*wallTimer

func (h wallHeap) Len() int { return len(h) }
func (h wallHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h wallHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *wallHeap) Push(x any) {
	t := x.(*wallTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *wallHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
