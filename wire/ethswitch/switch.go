// Package ethswitch is an Ethernet switch inside one process: each port is a wire.Link (a
// device's realtime host stands on one), frames between ports are handed over in memory, and
// an optional uplink joins the switch to a real link (a QEMU socket, an adapter). It learns
// which port owns a MAC from the frames that port sends, floods frames for MACs it does not know
// and broadcasts, and tells a tap about every frame it forwards, in order: one pcap of the
// whole fabric.
package ethswitch

import (
	"errors"
	"sync"
	"time"

	"github.com/softirdma/softirdma/wire/roce"
)

// QueueFrames is how many frames a port holds for its reader before the switch drops what
// comes next for it, as a switch drops on a congested port: the reader's transport recovers.
// Dropping rather than waiting keeps two ports that send to each other from each blocking on
// the other's full queue.
const QueueFrames = 8192

// ErrClosed is what a closed port's RecvBatch and SendBatch return.
var ErrClosed = errors.New("ethswitch: port closed")

// Tap sees each frame the switch forwards, from the port named src, at time t; the frame is
// valid only during the call.
type Tap func(src string, t time.Time, frame []byte)

// Faults decide what happens to frames on their way through the switch (wire/faultplan's Live
// is one).
type Faults interface {
	// Frame is asked once about each frame a port sends, before the tap sees it and under the
	// switch's lock: how many copies go on (0 drops it) and after how long. It may change the
	// frame (a corruption).
	Frame(src string, frame []byte) (copies int, delay time.Duration)
	// Down says whether a port's link is down: frames for it are not delivered.
	Down(port string) bool
}

// Switch joins ports.
type Switch struct {
	mu     sync.Mutex
	ports  map[*Port]bool
	byMAC  map[[6]byte]*Port
	tap    Tap
	faults Faults
}

// SetFaults sets what decides the frames' fates (nil: every frame goes on, once, at once).
func (s *Switch) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// New makes a switch without ports.
func New() *Switch {
	return &Switch{ports: map[*Port]bool{}, byMAC: map[[6]byte]*Port{}}
}

// SetTap sets the switch's tap (nil for none).
func (s *Switch) SetTap(t Tap) {
	s.mu.Lock()
	s.tap = t
	s.mu.Unlock()
}

// Port is one port of a switch: a wire.Link for whatever stands on it.
type Port struct {
	sw   *Switch
	name string

	mu     sync.Mutex
	ready  sync.Cond // a frame queued, or the port closed
	queue  [][]byte  // frames for the reader, in order
	free   [][]byte  // buffers to reuse
	closed bool
	stats  roce.LinkStats
	// Dropped counts frames for this port the switch dropped because its queue was full.
	dropped uint64

	// out is an uplink's real link: frames for the port go out on it (under outMu), frames
	// from it enter the switch.
	out   roce.Link
	outMu sync.Mutex
}

// NewPort adds a port named name (the tap's src for what it sends).
func (s *Switch) NewPort(name string) *Port {
	p := &Port{sw: s, name: name}
	p.ready.L = &p.mu
	s.mu.Lock()
	s.ports[p] = true
	s.mu.Unlock()
	return p
}

// Name is the port's name.
func (p *Port) Name() string { return p.name }

// SendBatch forwards each frame: to the port that sent from its destination MAC, or to every
// other port (and the uplink) for a broadcast, a multicast or a MAC not seen yet.
func (p *Port) SendBatch(frames [][]byte) (int, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	for _, f := range frames {
		p.sw.forward(p, f)
	}
	p.mu.Lock()
	p.stats.TxFrames += uint64(len(frames))
	for _, f := range frames {
		p.stats.TxBytes += uint64(len(f))
	}
	p.mu.Unlock()
	return len(frames), nil
}

// forward hands one frame from src over: to the port that sent from its destination MAC, or to
// every other port for a broadcast, a multicast or a MAC not seen yet; the faults, if any, may
// drop, duplicate, delay or change it first, and keep it from a port whose link is down. The
// tap sees what the faults left of it (a dropped frame too, as a capture on the wire would).
func (s *Switch) forward(src *Port, f []byte) {
	if len(f) < 14 {
		return
	}
	var dst, from [6]byte
	copy(dst[:], f[0:6])
	copy(from[:], f[6:12])
	var to []*Port
	s.mu.Lock()
	faults := s.faults
	copies, delay := 1, time.Duration(0)
	if faults != nil {
		// The faults may change the frame, which is the sender's: they get a copy.
		f = append([]byte(nil), f...)
		copies, delay = faults.Frame(src.name, f)
	}
	if from[0]&1 == 0 {
		s.byMAC[from] = src
	}
	if s.tap != nil {
		s.tap(src.name, time.Now(), f)
	}
	if q, ok := s.byMAC[dst]; ok && dst[0]&1 == 0 {
		if q != src {
			to = append(to, q)
		}
	} else {
		for q := range s.ports {
			if q != src {
				to = append(to, q)
			}
		}
	}
	s.mu.Unlock()
	for _, q := range to {
		if faults != nil && faults.Down(q.name) {
			continue
		}
		for range copies {
			if delay > 0 {
				q.deliverAfter(delay, f)
			} else {
				q.deliver(f)
			}
		}
	}
}

// deliverAfter delivers f once delay has passed (f is the faults' copy, the sender's buffer
// being its own again by then).
func (p *Port) deliverAfter(delay time.Duration, f []byte) {
	time.AfterFunc(delay, func() { p.deliver(f) })
}

// deliver queues a copy of f for the port's reader; the uplink's goes out on its link.
func (p *Port) deliver(f []byte) {
	if p.out != nil {
		p.sendOut(f)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if len(p.queue) >= QueueFrames {
		p.dropped++
		return
	}
	var b []byte
	if n := len(p.free); n > 0 {
		b, p.free = p.free[n-1], p.free[:n-1]
	}
	if cap(b) < len(f) {
		b = roce.NewFrameBuffer(max(len(f), roce.MaxFrameLen))
	}
	b = b[:len(f)]
	copy(b, f)
	p.queue = append(p.queue, b)
	p.ready.Signal()
}

// RecvBatch waits for a frame, then hands over up to len(bufs) queued frames: a frame's buffer
// takes the place of the caller's in bufs when that holds any frame (MaxFrameLen), the port
// keeping the caller's for a later frame, so a frame is copied once between two ports, as it is
// queued; into a shorter buffer it is copied.
func (p *Port) RecvBatch(bufs [][]byte, sizes []int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) == 0 && !p.closed {
		p.ready.Wait()
	}
	if len(p.queue) == 0 {
		return 0, ErrClosed
	}
	n, taken := 0, 0
	for n < len(bufs) && taken < len(p.queue) {
		f := p.queue[taken]
		taken++
		if len(f) > len(bufs[n]) {
			p.stats.RxDropped++
			p.free = append(p.free, f)
			continue
		}
		p.stats.RxFrames++
		p.stats.RxBytes += uint64(len(f))
		sizes[n] = len(f)
		if len(bufs[n]) >= roce.MaxFrameLen && cap(f) >= len(bufs[n]) {
			bufs[n], f = f[:len(bufs[n])], bufs[n]
		} else {
			copy(bufs[n], f)
		}
		p.free = append(p.free, f)
		n++
	}
	// What is left moves to the front: the queue's array serves for the port's life.
	left := copy(p.queue, p.queue[taken:])
	clear(p.queue[left:])
	p.queue = p.queue[:left]
	return n, nil
}

// Close takes the port off the switch: what was queued for it goes, a blocked RecvBatch
// returns ErrClosed, and the MACs it sent from are forgotten. An uplink's link is closed.
func (p *Port) Close() error {
	s := p.sw
	s.mu.Lock()
	delete(s.ports, p)
	for mac, q := range s.byMAC {
		if q == p {
			delete(s.byMAC, mac)
		}
	}
	s.mu.Unlock()
	p.mu.Lock()
	p.closed = true
	p.queue, p.free = nil, nil
	p.ready.Broadcast()
	p.mu.Unlock()
	if p.out != nil {
		return p.out.Close()
	}
	return nil
}

// Stats reports what crossed the port, and how many frames for it the switch dropped.
func (p *Port) Stats() (roce.LinkStats, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats, p.dropped
}

// Queued is how many frames wait for the port's reader.
func (p *Port) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}
