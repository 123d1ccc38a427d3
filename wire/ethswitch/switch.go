// Package ethswitch is an Ethernet switch inside one process: each port is a wire.Link (a
// device's realtime host stands on one), frames between ports are handed over in memory, and
// an optional uplink joins the switch to a real link (a QEMU socket, an adapter). It learns
// which port owns a MAC from the frames that port sends, floods frames for MACs it does not know
// and broadcasts, and tells a tap about every frame it forwards, in order: one pcap of the
// whole fabric.
package ethswitch

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
// valid only during the call. The switch calls it under its lock, so that it sees the frames in
// the order the faults do: a tap that writes a file should copy the frame for a writer of its
// own rather than write it there, or every port waits on the file (package fabric's capture
// queues it).
type Tap func(src string, t time.Time, frame []byte)

// Faults decide what happens to frames on their way through the switch (wire/faultplan's Live
// is one).
type Faults interface {
	// Frame is asked once about each frame a port sends, before the tap sees it and under the
	// switch's lock: how many copies go on (0 drops it) and after how long. It may change the
	// frame (a corruption). The frames it is asked about are the frames the tap sees, in the
	// same order.
	Frame(src string, frame []byte) (copies int, delay time.Duration)
	// Down says whether a port's link is down: frames for it are not delivered. It is asked,
	// under the switch's lock, about each port the frame Frame was asked about last would go
	// to, and only when that frame goes on (Frame gave it copies).
	Down(port string) bool
}

// Changer is Faults that say whether they changed the frame Frame was shown last (a
// corruption): the switch asks right after Frame, under its lock. A sealed frame (SendSealed)
// that faults without it were shown is not passed on as sealed: they might have changed it.
type Changer interface {
	Changed() bool
}

// Passer is Faults that number the frames they are shown: Pass counts a frame they may not
// touch (Switch.Record), so that their numbers stay the capture's.
type Passer interface {
	Pass()
}

// Switch joins ports.
type Switch struct {
	mu     sync.Mutex
	ports  map[*Port]bool
	byMAC  map[uint64]*Port // by macKey
	tap    Tap
	faults Faults

	// The frame buffers circulating between the ports and whatever stands on them: lent to a
	// sender (Buffer), queued for a port, exchanged for its reader's (RecvBatch), back here.
	poolMu sync.Mutex
	pool   [][]byte
}

// maxPool bounds the buffers the switch keeps for reuse (a MaxFrameLen buffer each).
const maxPool = 1024

// buffer is a frame buffer of MaxFrameLen bytes, its common payload on a cache line.
func (s *Switch) buffer() []byte {
	s.poolMu.Lock()
	if n := len(s.pool); n > 0 {
		b := s.pool[n-1]
		s.pool[n-1] = nil
		s.pool = s.pool[:n-1]
		s.poolMu.Unlock()
		return b[:roce.MaxFrameLen]
	}
	s.poolMu.Unlock()
	return roce.NewFrameBuffer(roce.MaxFrameLen)
}

// recycle keeps b for a later frame if it is a whole frame buffer and the pool has room.
func (s *Switch) recycle(b []byte) {
	one := [1][]byte{b}
	s.recycleAll(one[:])
}

// recycleAll is recycle for several buffers, under one hold of the pool's lock; it clears bs.
func (s *Switch) recycleAll(bs [][]byte) {
	s.poolMu.Lock()
	for _, b := range bs {
		if cap(b) >= roce.MaxFrameLen && len(s.pool) < maxPool {
			s.pool = append(s.pool, b)
		}
	}
	s.poolMu.Unlock()
	clear(bs)
}

// SetFaults sets what decides the frames' fates (nil: every frame goes on, once, at once).
func (s *Switch) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// New makes a switch without ports.
func New() *Switch {
	return &Switch{ports: map[*Port]bool{}, byMAC: map[uint64]*Port{}}
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
	queue  []queued  // frames for the reader from queue[head] on, in order
	head   int
	closed bool
	stats  roce.LinkStats
	// Dropped counts frames for this port the switch dropped because its queue was full.
	dropped uint64

	// out is an uplink's real link: frames for the port go out on it (under outMu), frames
	// from it enter the switch.
	out   roce.Link
	outMu sync.Mutex

	// The port's rate (SetRate) and when the frames handed to it so far have had their time.
	paceMu sync.Mutex
	rate   float64
	busy   time.Time
	paced  atomic.Bool // rate > 0
}

// queued is a frame waiting for a port's reader, in a buffer of the switch's.
type queued struct {
	b []byte
	// sealed: an engine built and sealed it (SendSealed) and nothing on the way changed it.
	sealed bool
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
		p.sw.forward(p, f, false, false)
	}
	p.mu.Lock()
	p.stats.TxFrames += uint64(len(frames))
	for _, f := range frames {
		p.stats.TxBytes += uint64(len(f))
	}
	p.mu.Unlock()
	return len(frames), nil
}

// Buffer lends a frame buffer (MaxFrameLen bytes) for SendBuffer: a frame built in it crosses
// the switch without a copy.
func (p *Port) Buffer() []byte { return p.sw.buffer() }

// SendBuffer forwards a frame built in a buffer from Buffer and takes the buffer: the frame is
// queued for its port as it is (a flood's other ports get copies); nil gives nothing back.
func (p *Port) SendBuffer(frame []byte) { p.sendBuffer(frame, false) }

// SendSealed is SendBuffer for a frame an engine built and sealed (engine.SealedLink): a port
// whose reader asks (RecvBatchSealed) learns that it is sealed, unless a fault may have changed
// it on the way; then the receiving engine need not compute its ICRC again.
func (p *Port) SendSealed(frame []byte) { p.sendBuffer(frame, true) }

// SendSealedBatch is SendSealed for several frames, in order: the port's and the switch's locks
// are taken once for a batch rather than once a frame (engine.SealedBatchLink). nil frames are
// skipped.
func (p *Port) SendSealedBatch(frames [][]byte) {
	p.mu.Lock()
	closed := p.closed
	if !closed {
		for _, f := range frames {
			if f != nil {
				p.stats.TxFrames++
				p.stats.TxBytes += uint64(len(f))
			}
		}
	}
	p.mu.Unlock()
	if closed {
		for _, f := range frames {
			if f != nil {
				p.sw.recycle(f)
			}
		}
		return
	}
	p.sw.forwardBatch(p, frames, true)
}

func (p *Port) sendBuffer(frame []byte, sealed bool) {
	if frame == nil {
		return
	}
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.stats.TxFrames++
		p.stats.TxBytes += uint64(len(frame))
	}
	p.mu.Unlock()
	if closed {
		p.sw.recycle(frame)
		return
	}
	p.sw.forward(p, frame, true, sealed)
}

// forward hands one frame from src over: to the port that sent from its destination MAC, or to
// every other port for a broadcast, a multicast or a MAC not seen yet; the faults, if any, may
// drop, duplicate, delay or change it first, and keep it from a port whose link is down. The
// tap sees what the faults left of it (a dropped frame too, as a capture on the wire would).
//
// owned says the switch owns f's buffer (SendBuffer): the last delivery takes it as it is,
// every other one a copy; otherwise f is the sender's and each delivery gets a copy. sealed says
// an engine sealed it (SendSealed): it stays so for the receivers if no fault changed it.
func (s *Switch) forward(src *Port, f []byte, owned, sealed bool) {
	if len(f) < 14 {
		if owned {
			s.recycle(f)
		}
		return
	}
	s.mu.Lock()
	r := s.routeLocked(src, f, owned, sealed)
	s.mu.Unlock()
	s.hand(&r)
}

// forwardBatch is forward for frames sent together, which the switch owns: the switch's lock is
// taken once for up to maxBatch of them, and a run of frames for one port is queued for it at
// once, its reader woken once. The tap and the faults see them in order, as they would one by
// one.
func (s *Switch) forwardBatch(src *Port, frames [][]byte, sealed bool) {
	var rs [maxBatch]route
	for len(frames) > 0 {
		chunk := frames[:min(len(frames), maxBatch)]
		frames = frames[len(chunk):]
		n := 0
		s.mu.Lock()
		for _, f := range chunk {
			if len(f) < 14 {
				if f != nil {
					s.recycle(f)
				}
				continue
			}
			rs[n] = s.routeLocked(src, f, true, sealed)
			n++
		}
		s.mu.Unlock()
		for i := 0; i < n; {
			q := rs[i].port()
			j := i + 1
			for q != nil && j < n && rs[j].port() == q {
				j++
			}
			if q != nil {
				q.deliverRun(rs[i:j])
			} else {
				s.hand(&rs[i])
			}
			i = j
		}
		clear(rs[:n])
	}
}

// maxBatch is how many frames forwardBatch routes under one hold of the switch's lock.
const maxBatch = 32

// macKey is a MAC address as a map key that hashes in one step (a [6]byte key hashes as bytes,
// a cost per frame).
func macKey(mac []byte) uint64 {
	return uint64(mac[0])<<40 | uint64(mac[1])<<32 | uint64(mac[2])<<24 | uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
}

// groupBit is the group (multicast, broadcast) bit of a macKey: the first octet's lowest.
const groupBit = 1 << 40

// route is where a frame goes and how, as routeLocked decided it: to one port (the usual case,
// which allocates nothing) or, flooded, to several.
type route struct {
	f      []byte
	owned  bool
	sealed bool
	one    *Port
	flood  []*Port // when one is nil
	copies int
	delay  time.Duration
}

// ports is how many ports the frame goes to; at(i) is the i-th.
func (r *route) ports() int {
	if r.one != nil {
		return 1
	}
	return len(r.flood)
}

func (r *route) at(i int) *Port {
	if r.one != nil {
		return r.one
	}
	return r.flood[i]
}

// port is the one port a frame goes to once, at once, as the switch owns it; nil for any other
// route (a flood, a duplicate, a delay, none).
func (r *route) port() *Port {
	if r.copies == 1 && r.delay == 0 && r.owned {
		return r.one
	}
	return nil
}

// routeLocked runs the faults over a frame, learns its source MAC, shows it to the tap and
// decides where it goes. f is at least a header long. s.mu is held.
func (s *Switch) routeLocked(src *Port, f []byte, owned, sealed bool) route {
	dst, from := macKey(f[0:6]), macKey(f[6:12])
	faults := s.faults
	copies, delay := 1, time.Duration(0)
	if faults != nil {
		// The faults may change the frame: not the sender's.
		if !owned {
			f, owned = s.copyOf(f), true
		}
		copies, delay = faults.Frame(src.name, f)
		if c, ok := faults.(Changer); !ok || c.Changed() {
			sealed = false
		}
	}
	if from&groupBit == 0 && s.byMAC[from] != src {
		s.byMAC[from] = src
	}
	if s.tap != nil {
		s.tap(src.name, time.Now(), f)
	}
	r := route{f: f, owned: owned, sealed: sealed, copies: copies, delay: delay}
	if copies == 0 {
		return r
	}
	// The faults' Down is asked here, with the frame they were shown last, so that a flap counts
	// the frames it stopped as the ones the capture numbers.
	if q, ok := s.byMAC[dst]; ok && dst&groupBit == 0 {
		if q != src && (faults == nil || !faults.Down(q.name)) {
			r.one = q
		}
		return r
	}
	for q := range s.ports {
		if q != src && (faults == nil || !faults.Down(q.name)) {
			r.flood = append(r.flood, q)
		}
	}
	return r
}

// hand delivers a routed frame's copies, outside the switch's lock.
func (s *Switch) hand(r *route) {
	n := r.ports() * r.copies
	for i := range r.ports() {
		q := r.at(i)
		for c := range r.copies {
			b := r.f
			if !r.owned || i*r.copies+c < n-1 {
				b = s.copyOf(r.f)
			}
			if r.delay > 0 {
				q.deliverAfter(r.delay, b, r.sealed)
			} else {
				q.deliver(b, r.sealed)
			}
		}
	}
	if r.owned && n == 0 {
		s.recycle(r.f)
	}
}

// Record shows the tap a frame that does not cross the switch (one a device on the port named
// src hands back to itself), in order with the frames the switch forwards. Faults that number
// frames count it (Passer) but do not see it: nothing on the switch could drop it.
func (s *Switch) Record(src string, f []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.faults.(Passer); ok {
		p.Pass()
	}
	if s.tap != nil {
		s.tap(src, time.Now(), f)
	}
}

// copyOf is f in a buffer of the switch's.
func (s *Switch) copyOf(f []byte) []byte {
	b := s.buffer()[:len(f)]
	copy(b, f)
	return b
}

// deliverAfter delivers f once delay has passed.
func (p *Port) deliverAfter(delay time.Duration, f []byte, sealed bool) {
	time.AfterFunc(delay, func() { p.deliver(f, sealed) })
}

// deliver queues f, a buffer of the switch's that the port now owns, for the port's reader;
// the uplink's goes out on its link.
func (p *Port) deliver(f []byte, sealed bool) {
	p.pace(len(f))
	if p.out != nil {
		p.sendOut(f)
		p.sw.recycle(f)
		return
	}
	p.mu.Lock()
	p.queueLocked(f, sealed)
	p.ready.Signal()
	p.mu.Unlock()
}

// deliverRun delivers the frames of routes whose one port is p, in order, taking the port's
// lock and waking its reader once for them all.
func (p *Port) deliverRun(rs []route) {
	if p.out != nil {
		for _, r := range rs {
			p.deliver(r.f, r.sealed)
		}
		return
	}
	for _, r := range rs {
		p.pace(len(r.f))
	}
	p.mu.Lock()
	for _, r := range rs {
		p.queueLocked(r.f, r.sealed)
	}
	p.ready.Signal()
	p.mu.Unlock()
}

// queueLocked queues f for the reader, or drops it if the port is closed or its queue full.
// p.mu is held.
func (p *Port) queueLocked(f []byte, sealed bool) {
	if p.closed || len(p.queue)-p.head >= QueueFrames {
		if !p.closed {
			p.dropped++
		}
		p.sw.recycle(f)
		return
	}
	if len(p.queue) == cap(p.queue) && p.head >= len(p.queue)/2 {
		// At least half the array is taken: what is left moves to the front rather than the
		// array growing.
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
	p.queue = append(p.queue, queued{f, sealed})
}

// RecvBatch waits for a frame, then hands over up to len(bufs) queued frames: a frame's buffer
// takes the place of the caller's in bufs when that holds any frame (MaxFrameLen), the switch
// keeping the caller's for a later frame, so a frame built in a buffer from Buffer is never
// copied between two ports and one from SendBatch once, as it is queued; into a shorter buffer
// it is copied.
func (p *Port) RecvBatch(bufs [][]byte, sizes []int) (int, error) {
	return p.RecvBatchSealed(bufs, sizes, nil)
}

// RecvBatchSealed is RecvBatch that also says, in sealed (as long as bufs, or nil), which
// frames an engine sealed and nothing changed on the way (SendSealed): a receiving engine hands
// them to engine.Device.ReceiveSealed.
func (p *Port) RecvBatchSealed(bufs [][]byte, sizes []int, sealed []bool) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.head == len(p.queue) && !p.closed {
		p.ready.Wait()
	}
	if p.head == len(p.queue) {
		return 0, ErrClosed
	}
	// The buffers given back go to the pool together, after the batch.
	var freed [32][]byte
	nfreed := 0
	free := func(f []byte) {
		if nfreed == len(freed) {
			p.sw.recycleAll(freed[:])
			nfreed = 0
		}
		freed[nfreed] = f
		nfreed++
	}
	defer func() { p.sw.recycleAll(freed[:nfreed]) }()
	n := 0
	for n < len(bufs) && p.head < len(p.queue) {
		q := p.queue[p.head]
		f := q.b
		p.queue[p.head] = queued{}
		p.head++
		if len(f) > len(bufs[n]) {
			p.stats.RxDropped++
			free(f)
			continue
		}
		p.stats.RxFrames++
		p.stats.RxBytes += uint64(len(f))
		sizes[n] = len(f)
		if sealed != nil {
			sealed[n] = q.sealed
		}
		if len(bufs[n]) >= roce.MaxFrameLen && cap(f) >= len(bufs[n]) {
			bufs[n], f = f[:len(bufs[n])], bufs[n]
		} else {
			copy(bufs[n], f)
		}
		free(f)
		n++
	}
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0 // the array serves again from its start
	}
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
	p.queue, p.head = nil, 0
	p.ready.Broadcast()
	p.mu.Unlock()
	if p.out != nil {
		return p.out.Close()
	}
	return nil
}

// Counters are what crossed a port, seen from the switch: In the frames it took from whatever
// stands on the port (a function's transmits, what an uplink's link brought), Out those it
// handed over to it.
type Counters struct {
	InFrames, InBytes, OutFrames, OutBytes uint64
	// Dropped counts frames for the port that the switch could not hand over: its queue was
	// full (a reader that does not keep up), a frame was longer than the reader's buffer, or an
	// uplink's link refused it. A fault's drops are the fault's, not counted here.
	Dropped uint64
	// Queued is how many frames wait for the port's reader.
	Queued int
}

// Counters reports what crossed the port so far, from the switch's side.
func (p *Port) Counters() Counters {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := Counters{InFrames: p.stats.TxFrames, InBytes: p.stats.TxBytes, OutFrames: p.stats.RxFrames, OutBytes: p.stats.RxBytes,
		Dropped: p.dropped + p.stats.RxDropped, Queued: len(p.queue) - p.head}
	if p.out != nil {
		// An uplink's stats are its link's: what it received went into the switch.
		c.InFrames, c.InBytes, c.OutFrames, c.OutBytes = p.stats.RxFrames, p.stats.RxBytes, p.stats.TxFrames, p.stats.TxBytes
	}
	return c
}

// Ports are the switch's ports, by name.
func (s *Switch) Ports() []*Port {
	s.mu.Lock()
	ports := make([]*Port, 0, len(s.ports))
	for p := range s.ports {
		ports = append(ports, p)
	}
	s.mu.Unlock()
	slices.SortFunc(ports, func(a, b *Port) int { return strings.Compare(a.name, b.name) })
	return ports
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
	return len(p.queue) - p.head
}
