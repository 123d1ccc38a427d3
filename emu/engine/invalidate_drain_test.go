package engine_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
)

// stallingSpace is one mapped region whose Segments can be made to stall once, holding a copy
// into it mid-way after its rkey check.
type stallingSpace struct {
	mem      []byte
	mu       sync.Mutex
	armed    bool
	entered  chan struct{} // closed when the stalled copy has reached the memory
	released chan struct{} // closed by the test to let it go on
	once     sync.Once
}

func (s *stallingSpace) Mapped(addr, n uint64) bool { return addr+n <= uint64(len(s.mem)) }

// newStallingSpace is a stallingSpace of n bytes, let go when the test ends: a failed test must
// not leave a device's goroutine stalled. Made after carriedRC, its cleanup runs before carry's.
func newStallingSpace(t *testing.T, n int) *stallingSpace {
	s := &stallingSpace{mem: make([]byte, n), entered: make(chan struct{}), released: make(chan struct{})}
	t.Cleanup(s.letGo)
	return s
}

// arm makes the next copy through the space stall.
func (s *stallingSpace) arm() {
	s.mu.Lock()
	s.armed = true
	s.mu.Unlock()
}

// letGo lets the stalled copy go on; once is enough.
func (s *stallingSpace) letGo() { s.once.Do(func() { close(s.released) }) }

// waitStalled waits for a copy to stall in the space; what says which, if none does.
func (s *stallingSpace) waitStalled(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached the memory", what)
	}
}

// blocks starts verb, named what, which must not return while the stalled copy waits: however
// slow the machine, a verb that waits cannot return before the copy goes on, and one that does
// not wait returns at once, well within 200 ms. finish lets the copy go on and wants verb to
// return nil then.
func (s *stallingSpace) blocks(t *testing.T, what string, verb func() error) (finish func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- verb() }()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while a copy over its memory was still under way", what, err)
	case <-time.After(200 * time.Millisecond):
	}
	return func() {
		t.Helper()
		s.letGo()
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return after the copy went on", what)
		}
	}
}

func (s *stallingSpace) Segments(addr, n uint64, dst [][]byte) [][]byte {
	s.mu.Lock()
	stall := s.armed
	s.armed = false
	s.mu.Unlock()
	if stall {
		close(s.entered)
		<-s.released
	}
	return append(dst, s.mem[addr:addr+n:addr+n])
}

// frameChan carries a device's frames to a goroutine that hands them to its peer.
type frameChan chan []byte

func (l frameChan) Send(frame []byte) error {
	l <- append([]byte(nil), frame...)
	return nil
}

// carry joins two devices by goroutines that deliver each one's frames to the other, until the
// test ends.
func carry(t *testing.T, a, b *engine.Device) {
	la, lb := make(frameChan, 1024), make(frameChan, 1024)
	a.Attach(la)
	b.Attach(lb)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, e := range []struct {
		from frameChan
		to   *engine.Device
	}{{la, b}, {lb, a}} {
		wg.Go(func() {
			for {
				select {
				case f := <-e.from:
					e.to.Receive(f)
				case <-stop:
					return
				}
			}
		})
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// carriedRC is an RC connection between two wall-clock devices that goroutines carry frames
// between, with a PD and a CQ on each side.
func carriedRC(t *testing.T) wallTraffic {
	t.Helper()
	a, b := wallDevices()
	return carriedRCOn(t, a, b)
}

// carriedRCOn is carriedRC between a and b.
func carriedRCOn(t *testing.T, a, b *engine.Device) wallTraffic {
	t.Helper()
	carry(t, a, b)
	var w wallTraffic
	var err error
	for _, e := range []struct {
		dev *engine.Device
		pd  **engine.PD
		cq  **engine.CQ
		qp  **engine.QP
	}{{a, &w.pdA, &w.cqA, &w.qa}, {b, &w.pdB, &w.cqB, &w.qb}} {
		*e.pd, err = e.dev.AllocPD()
		must(t, err)
		*e.cq, err = e.dev.CreateCQ(64)
		must(t, err)
		caps := engine.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
		*e.qp, err = (*e.pd).CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: *e.cq, RecvCQ: *e.cq, Cap: caps})
		must(t, err)
	}
	must(t, engine.ConnectRC(w.qa, w.qb, engine.ConnectOptions{Timeout: 18}))
	return w
}

// W19, the other side of it: a WRITE that passed the window's rkey check before dealloc_mw has
// landed when dealloc_mw returns, and nothing writes the memory afterwards. Taking a key's access
// away waits for the copies already through it, as deregistration does.
func TestW19DeallocMWWaitsForAWriteAlreadyThrough(t *testing.T) {
	w := carriedRC(t)
	pdA, pdB, cqA, cqB, qa, qb := w.pdA, w.pdB, w.cqA, w.cqB, w.qa, w.qb

	space := newStallingSpace(t, 1<<16)
	mr, err := pdB.RegImplicitMR(space, engine.AccessLocalWrite|engine.AccessRemoteWrite|engine.AccessMWBind)
	must(t, err)
	mw, err := pdB.AllocMW(engine.MWType2)
	must(t, err)
	must(t, qb.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRBindMW, Flags: engine.SendSignaled,
		Bind: engine.BindInfo{MW: mw, RKey: mw.RKey() + 1, MR: mr, Addr: 0x1000, Length: 4096, Access: engine.AccessRemoteWrite}}))
	waitCQ(cqB, time.Now().Add(10*time.Second))
	wantWC(t, poll(cqB), engine.WC{WRID: 1, Opcode: engine.WCBindMW})

	src := make([]byte, 64)
	fill(src, 0xab)
	mrA, err := pdA.RegMR(src, engine.AccessLocalWrite)
	must(t, err)
	space.arm()
	must(t, qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(mrA, 0, 64), RemoteAddr: 0x1000, RKey: mw.RKey()}))
	space.waitStalled(t, "the WRITE")
	space.blocks(t, "dealloc_mw", mw.Dealloc)()
	if got := space.mem[0x1000 : 0x1000+64]; string(got) != string(src) {
		t.Fatalf("when dealloc_mw returned, B's memory held % x, want the WRITE's bytes", got[:8])
	}
	waitCQ(cqA, time.Now().Add(10*time.Second))
	wantWC(t, poll(cqA), engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite})
}

// The requester's side of the same: Dereg of the MR a WRITE is gathering its payload from waits
// for the copy, which the requester's run makes in the run's pin scope, and the WRITE lands
// whole. And a run that drains an MR itself after a copy of its own (B's WRITE, then a REG_MR)
// closes its own scope first rather than wait for it for ever.
func TestDeregWaitsForTheRequestersCopy(t *testing.T) {
	// Each device on a clock of its own: A's is the one the stalled copy holds.
	a, b := wallDevicesOn(realtime.NewWallClock(), realtime.NewWallClock())
	w := carriedRCOn(t, a, b)
	pdA, pdB, cqA, cqB, qa, qb := w.pdA, w.pdB, w.cqA, w.cqB, w.qa, w.qb

	space := newStallingSpace(t, 1<<16)
	fill(space.mem[0x3000:0x3040], 0xcd)
	mrA, err := pdA.RegImplicitMR(space, engine.AccessLocalWrite)
	must(t, err)
	dst := make([]byte, 4096)
	mrB, err := pdB.RegMR(dst, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(t, err)
	space.arm()
	must(t, qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled,
		SGL: []engine.SGE{{Addr: 0x3000, Length: 64, LKey: mrA.LKey()}}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}))
	space.waitStalled(t, "the WRITE")
	finishDereg := space.blocks(t, "dereg_mr", mrA.Dereg)

	// Meanwhile B's run sends a WRITE to A, which opens the run's pin scope, and then runs a
	// REG_MR, which drains the MR from inside that run: B closes its own scope first, so the
	// drain waits for nothing of B's. (The WRITE's ACK leaves A only once A's clock goes on.)
	toA := make([]byte, 64)
	mrToA, err := pdA.RegMR(toA, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(t, err)
	fmr, err := pdB.AllocFastRegMR(4096)
	must(t, err)
	must(t, qb.PostSend(
		engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(mrB, 0, 64), RemoteAddr: mrToA.Addr(), RKey: mrToA.RKey()},
		engine.SendWR{ID: 3, Opcode: engine.WRRegMR, Flags: engine.SendSignaled,
			Reg: engine.RegInfo{MR: fmr, Key: otherKey8(fmr.LKey()), Buf: make([]byte, 4096), IOVA: 0x9000, Access: engine.AccessLocalWrite}}))

	finishDereg()
	waitCQ(cqA, time.Now().Add(10*time.Second))
	wantWC(t, poll(cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite})
	if string(dst[:64]) != string(space.mem[0x3000:0x3040]) {
		t.Fatalf("B's memory holds % x, want the WRITE's bytes", dst[:8])
	}
	var got []engine.WC
	for deadline := time.Now().Add(10 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		waitCQ(cqB, deadline)
		got = append(got, poll(cqB)...)
	}
	wantWC(t, got, engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 3, Opcode: engine.WCRegMR})
}

// vanishingSpace is one mapped region that says it is mapped but, once armed, yields none of
// its bytes: a range unmapped between an access's check and its copy.
type vanishingSpace struct {
	mem  []byte
	gone atomic.Bool
}

func (s *vanishingSpace) Mapped(addr, n uint64) bool { return addr+n <= uint64(len(s.mem)) }

func (s *vanishingSpace) Segments(addr, n uint64, dst [][]byte) [][]byte {
	if s.gone.Load() {
		return dst
	}
	return append(dst, s.mem[addr:addr+n:addr+n])
}

// A READ response whose bytes went away between the rkey check and the copy is not sent with
// whatever its frame buffer held before: the READ ends in NAK 0x62, REM_ACCESS_ERR.
func TestW19ReadResponseOfVanishedMemoryNotSent(t *testing.T) {
	w := carriedRC(t)
	pdA, pdB, cqA, qa := w.pdA, w.pdB, w.cqA, w.qa
	space := &vanishingSpace{mem: make([]byte, 1<<16)}
	fill(space.mem, 0x5a)
	mrB, err := pdB.RegImplicitMR(space, engine.AccessLocalWrite|engine.AccessRemoteRead)
	must(t, err)
	dst := make([]byte, 4096)
	mrA, err := pdA.RegMR(dst, engine.AccessLocalWrite)
	must(t, err)
	read := func(id uint64) {
		must(t, qa.PostSend(engine.SendWR{ID: id, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(mrA, 0, 1024), RemoteAddr: 0x2000, RKey: mrB.RKey()}))
		waitCQ(cqA, time.Now().Add(10*time.Second))
	}
	read(1) // fills B's frame buffers with a READ response of 0x5a
	wantWC(t, poll(cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: 1024})
	clear(dst)
	space.gone.Store(true)
	read(2)
	wantWC(t, poll(cqA), engine.WC{WRID: 2, Opcode: engine.WCRDMARead, Status: engine.WCRemAccessErr})
	if dst[0] != 0 {
		t.Fatalf("A's buffer took % x from a READ response of memory that was gone", dst[:8])
	}
}

// A destroyed QP stays destroyed: modify_qp and post_recv are EINVAL, and failing it (as a
// device model does when a guest's memory under it goes) flushes nothing and raises nothing,
// since its number may be another QP's by then.
func TestDestroyedQPStaysDestroyed(t *testing.T) {
	p := plainPair(t)
	var events []engine.AsyncEvent
	p.a.OnAsyncEvent(func(e engine.AsyncEvent) { events = append(events, e) })
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	must(t, p.qa.Destroy())
	p.sim.RunUntilIdle(0)
	err := p.qa.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags)
	if !errors.Is(err, syscall.EINVAL) {
		t.Errorf("modify_qp of a destroyed QP: %v, want EINVAL", err)
	}
	if err := p.qa.PostRecv(engine.RecvWR{ID: 2, SGL: sge(p.mrA, 0, 64)}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("post_recv on a destroyed QP: %v, want EINVAL", err)
	}
	p.qa.Fail("the guest's memory went away")
	p.sim.RunUntilIdle(0)
	if wcs := poll(p.cqA); len(wcs) != 0 {
		t.Errorf("a destroyed QP flushed %v", wcs)
	}
	if len(events) != 0 {
		t.Errorf("a destroyed QP raised %v", events)
	}
}
