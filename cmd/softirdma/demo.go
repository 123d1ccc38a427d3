package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"

	"github.com/softirdma/softirdma/keys"
)

func init() {
	register("demo", "a guided, seeded tour of two cards on the simulated wire (no QEMU, no adapter, no root)", runDemo)
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	return demoMain(args, stdout, stderr, demoEnv{self: selfCommand(os.Args[0]), now: time.Now})
}

// demoEnv is what the demo takes from outside the simulation: how to run this program again, for
// the hint after a capture, and the wall clock, for the one line that reports wall time.
type demoEnv struct {
	self string
	now  func() time.Time
}

func demoMain(args []string, stdout, stderr io.Writer, env demoEnv) (code int) {
	fs := newFlagSet("demo", stderr)
	seed := fs.Uint64("seed", 1, "seed for every random choice (key8 values, faults); the same seed gives the same run and pcap")
	loss := fs.Float64("loss", 0, "probability that the simulated wire loses a frame, each way (0 to 0.5)")
	pcapPath := fs.String("pcap", "", "write every frame on the wire to this pcap file")
	trace := fs.Bool("trace", false, "print every event of the engine (QP states, packets, NAKs, retries, faults)")
	setUsage(fs, stderr,
		"usage: softirdma demo [-seed N] [-loss P] [-pcap FILE] [-trace]",
		"",
		"Two softirdma devices, A and B, on a simulated RoCEv2 wire with one RC connection.",
		"B registers memory and binds type 1 and type 2 memory windows (watch the rkeys rotate);",
		"A writes, reads and runs atomics through them, invalidates a window with SEND_WITH_INV,",
		"and meets a stale rkey. Exits 0 only when every step got the expected result.",
		"",
		"With -loss, RC resends what the wire loses. When the wire loses all retry_cnt (7) resends, the",
		"QP gives up with RETRY_EXC_ERR, as a real NIC does; the demo says what the lost try did, connects",
		"a fresh QP pair and goes on. The stale rkey ends in REM_ACCESS_ERR, or in RETRY_EXC_ERR when the",
		"wire loses B's NAK: B's QP is in ERR by then and answers no retry.",
		"",
	)
	if code, done := parseNoArgs(fs, args); done {
		return code
	}
	if !(*loss >= 0 && *loss <= 0.5) { // also refuses NaN, which every comparison rejects
		fmt.Fprintf(stderr, "softirdma demo: -loss must be a probability from 0 to 0.5, not %g\n", *loss)
		return 2
	}
	d := &demo{out: stdout, trace: *trace}
	var pcap io.Writer
	if *pcapPath != "" {
		f, err := os.Create(*pcapPath)
		if err != nil {
			fmt.Fprintf(stderr, "softirdma demo: %v\n", err)
			return 2
		}
		// A capture that could not be written in full fails the run: the hint would point at it.
		defer func() {
			if err := f.Close(); err != nil {
				fmt.Fprintf(stderr, "softirdma demo: writing %s: %v\n", *pcapPath, err)
				code = 1
			}
		}()
		pcap = &errWriter{w: f}
	}
	start := env.now()
	if err := d.setup(*seed, *loss, pcap); err != nil {
		fmt.Fprintf(stderr, "softirdma demo: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "softirdma demo, seed %d, loss %g: devices A (%s) and B (%s), RC QP 0x%06x -> 0x%06x, MTU 1024\n\n",
		*seed, *loss, d.a.IP(), d.b.IP(), d.qa.Num(), d.qb.Num())
	d.run()
	if w, ok := pcap.(*errWriter); ok && w.err != nil {
		fmt.Fprintf(stderr, "softirdma demo: writing %s: %v\n", *pcapPath, w.err)
		return 1
	}
	fmt.Fprintln(stdout)
	d.cost(env.now().Sub(start), env.self, *pcapPath)
	if d.failed > 0 {
		fmt.Fprintf(stdout, "FAILED: %d of %d steps did not get the expected result\n", d.failed, d.steps)
		return 1
	}
	fmt.Fprintf(stdout, "all %d steps got the expected result\n", d.steps)
	return 0
}

// demo is the tour's state: two devices on a fabric, one connection, memory on both sides.
type demo struct {
	out           io.Writer
	trace         bool
	steps, failed int
	lost          int // connections that ended in RETRY_EXC_ERR and were replaced

	sim      *sim.Sim
	fab      *sim.Fabric
	a, b     *engine.Device
	pdA, pdB *engine.PD
	cqA, cqB *engine.CQ
	qa, qb   *engine.QP
	bufA     []byte
	bufB     []byte
	mrA, mrB *engine.MR
	w1, w2   *engine.MW
	w2Bound  bool // the type 2 window is bound, and so tied to qb
	events   []engine.Event
}

// The connection's settings. The local ACK timeout costs no wall-clock time in the simulator;
// retry_cnt is the most IBTA allows.
const (
	demoTimeout  = 10 // 4.096 µs × 2^10: 4.2 ms
	demoRetryCnt = engine.DefaultRetryCnt
)

// maxConnections bounds how many connections one step uses. At -loss 0.5 each way a request and
// its response both get through one time in four, so the eight tries that retry_cnt 7 allows all
// fail about one time in ten, and a multi-packet step more often: over 10,000 seeds about one
// connection in five was lost, and no step needed more than seven. Twenty is far out of reach.
const maxConnections = 20

func (d *demo) setup(seed uint64, loss float64, pcap io.Writer) error {
	d.sim = sim.NewSim()
	d.fab = sim.NewFabric(d.sim, seed)
	d.fab.OnEvent(func(e engine.Event) {
		d.events = append(d.events, e)
		if d.trace {
			fmt.Fprintf(d.out, "          . %s\n", e)
		}
	})
	if pcap != nil {
		if err := d.fab.CapturePcap(pcap); err != nil {
			return err
		}
	}
	link := sim.LinkConfig{Loss: loss, Rate: 10e9}
	d.a = d.fab.AddDevice("A", link)
	d.b = d.fab.AddDevice("B", link)
	var err error
	if d.pdA, err = d.a.AllocPD(); err != nil {
		return err
	}
	if d.pdB, err = d.b.AllocPD(); err != nil {
		return err
	}
	if d.cqA, err = d.a.CreateCQ(256); err != nil {
		return err
	}
	if d.cqB, err = d.b.CreateCQ(256); err != nil {
		return err
	}
	if d.qa, d.qb, err = d.connect(); err != nil {
		return err
	}
	d.bufA, d.bufB = make([]byte, 64<<10), make([]byte, 64<<10)
	d.mrA, err = d.pdA.RegMR(d.bufA, engine.AccessLocalWrite)
	return err
}

// connect creates an RC QP on each device and connects them.
func (d *demo) connect() (qa, qb *engine.QP, err error) {
	caps := engine.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}
	if qa, err = d.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: d.cqA, RecvCQ: d.cqA, Cap: caps}); err != nil {
		return nil, nil, err
	}
	if qb, err = d.pdB.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: d.cqB, RecvCQ: d.cqB, Cap: caps}); err != nil {
		return nil, nil, err
	}
	err = engine.ConnectRC(qa, qb, engine.ConnectOptions{MTU: engine.MTU1024, Timeout: demoTimeout, RetryCnt: demoRetryCnt})
	return qa, qb, err
}

// step prints one numbered line; ok says whether the step got what it expected.
func (d *demo) step(ok bool, format string, args ...any) {
	d.steps++
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		d.failed++
	}
	fmt.Fprintf(d.out, "%s %2d  %s\n", mark, d.steps, fmt.Sprintf(format, args...))
}

func (d *demo) explain(format string, args ...any) {
	fmt.Fprintf(d.out, "          %s\n", fmt.Sprintf(format, args...))
}

// complete runs the simulator until cq has a completion and returns it.
func (d *demo) complete(cq *engine.CQ) (engine.WC, bool) {
	var wc [1]engine.WC
	ok := d.sim.RunUntil(func() bool { return cq.Len() > 0 })
	if !ok {
		return engine.WC{}, false
	}
	cq.Poll(wc[:])
	return wc[0], true
}

// post posts one send WR on qp, runs until it completes on cq, and returns the completion.
func (d *demo) post(qp *engine.QP, cq *engine.CQ, wr engine.SendWR) engine.WC {
	wr.Flags |= engine.SendSignaled
	if err := qp.PostSend(wr); err != nil {
		return engine.WC{Status: engine.WCGeneralErr, Err: err}
	}
	wc, ok := d.complete(cq)
	if !ok {
		return engine.WC{Status: engine.WCGeneralErr, Err: fmt.Errorf("no completion for wr %d", wr.ID)}
	}
	return wc
}

func (d *demo) sgeA(off uint64, n uint32) []engine.SGE {
	return []engine.SGE{{Addr: d.mrA.Addr() + off, Length: n, LKey: d.mrA.LKey()}}
}

// since counts the events of kind on device dev (and QP qpn, unless 0) from index mark on.
func (d *demo) since(mark int, dev string, qpn uint32, kind engine.EventKind) int {
	n := 0
	for _, e := range d.events[mark:] {
		if e.Kind == kind && e.Device == dev && (qpn == 0 || e.QP == qpn) {
			n++
		}
	}
	return n
}

// settle lets the last frames of a connection that has given up land or be lost, so that what B
// did with them can be read.
func (d *demo) settle() { d.sim.RunUntilIdle(0) }

// onWire runs one of A's operations across the wire. RC resends what the wire loses, but only
// retry_cnt times in a row: when the wire loses them all, A's QP completes the work request with
// RETRY_EXC_ERR and goes to ERR, as a real NIC does, and the connection is gone. Then the demo does
// what an application must: lost reports what the lost try did at B and says whether to try again
// (an operation that is not idempotent may need B to undo it first), and A and B connect a fresh
// QP pair. The completion returned is the last try's.
func (d *demo) onWire(try func() engine.WC, lost func() (again bool)) engine.WC {
	for n := 1; ; n++ {
		mark := len(d.events)
		wc := try()
		if wc.Status != engine.WCRetryExcErr || n == maxConnections {
			return wc
		}
		d.settle()
		d.explain("the connection is lost: %s (%v) after the wire lost %d frames; A's QP 0x%06x is in %s",
			wc.Status, wc.Err, d.since(mark, "A", 0, engine.EvFault)+d.since(mark, "B", 0, engine.EvFault), d.qa.Num(), d.qa.State())
		again := lost == nil || lost()
		d.reconnect(true, again)
		if !again {
			return wc
		}
	}
}

// reconnect replaces the QP pair with a fresh one, as an application does after its connection
// fails. A type 2 window is tied to the QP that bound it, so B moves a bound one to its new QP.
func (d *demo) reconnect(lost, again bool) {
	if lost {
		d.lost++
	}
	oldA, oldB := d.qa, d.qb
	qa, qb, err := d.connect()
	if err != nil {
		d.step(false, "A and B connect a fresh QP pair: %v", err)
		return
	}
	d.qa, d.qb = qa, qb
	switch {
	case lost && again:
		d.explain("A and B connect a fresh QP pair, 0x%06x -> 0x%06x, and A tries again", d.qa.Num(), d.qb.Num())
	case lost:
		d.explain("A and B connect a fresh QP pair, 0x%06x -> 0x%06x", d.qa.Num(), d.qb.Num())
	}
	if d.w2Bound {
		old := d.w2.RKey()
		inv := d.post(d.qb, d.cqB, engine.SendWR{ID: 100, Opcode: engine.WRLocalInv, Imm: old})
		want := uint32(keys.Key(old).Inc())
		bind := d.post(d.qb, d.cqB, d.bindW2(101, want))
		d.explain("B's type 2 window was tied to QP 0x%06x: LOCAL_INV %s, BIND_MW on QP 0x%06x %s: rkey 0x%08x -> 0x%08x",
			oldB.Num(), inv.Status, d.qb.Num(), bind.Status, old, d.w2.RKey())
		if inv.Status != engine.WCSuccess || bind.Status != engine.WCSuccess || d.w2.RKey() != want {
			d.step(false, "B moves its type 2 window to QP 0x%06x", d.qb.Num())
		}
	}
	for _, err := range []error{oldA.Destroy(), oldB.Destroy()} {
		if err != nil {
			d.step(false, "destroy the old QP pair: %v", err)
		}
	}
}

// bindW2 is the BIND_MW work request that binds the type 2 window over B's 8-byte word.
func (d *demo) bindW2(id uint64, rkey uint32) engine.SendWR {
	return engine.SendWR{ID: id, Opcode: engine.WRBindMW, Bind: engine.BindInfo{MW: d.w2, RKey: rkey, MR: d.mrB,
		Addr: d.mrB.Addr() + wordOff, Length: 8, Access: engine.AccessRemoteAtomic | engine.AccessRemoteRead}}
}

// wordOff is where B's 8-byte word for the atomics lives.
const wordOff = 32 << 10

func (d *demo) word() uint64 { return binary.LittleEndian.Uint64(d.bufB[wordOff:]) }

func (d *demo) setWord(v uint64) { binary.LittleEndian.PutUint64(d.bufB[wordOff:], v) }

func (d *demo) run() {
	if !d.registerB() || !d.bindType1() {
		return
	}
	d.writeAndRead()
	if !d.bindType2() {
		return
	}
	d.atomics()
	rkey2 := d.sendWithInv()
	d.rebindAndInvalidate(rkey2)
	d.staleRKey(rkey2)
	d.freshConnection()
}

// registerB registers B's memory: LOCAL_WRITE|MW_BIND and no remote rights of its own; windows
// grant them.
func (d *demo) registerB() bool {
	var err error
	d.mrB, err = d.pdB.RegMR(d.bufB, engine.AccessLocalWrite|engine.AccessMWBind)
	if err != nil {
		d.step(false, "B: reg_mr 64 KiB: %v", err)
		return false
	}
	d.step(true, "B: reg_mr 64 KiB at 0x%x, LOCAL_WRITE|MW_BIND: lkey = rkey = 0x%08x; the MR itself grants no remote access",
		d.mrB.Addr(), d.mrB.RKey())
	return true
}

// allocMW allocates a window of type typ in B's PD, saying so when it cannot.
func (d *demo) allocMW(typ engine.MWType) (*engine.MW, bool) {
	w, err := d.pdB.AllocMW(typ)
	if err != nil {
		d.step(false, "B: alloc_mw type %d: %v", uint8(typ), err)
		return nil, false
	}
	return w, true
}

// bindType1 binds a type 1 window by the bind verb: key8 + 1. It belongs to B's PD, not to a QP.
func (d *demo) bindType1() bool {
	var ok bool
	if d.w1, ok = d.allocMW(engine.MWType1); !ok {
		return false
	}
	old := d.w1.RKey()
	err := d.qb.BindMW(d.w1, engine.MWBind{ID: 1, Flags: engine.SendSignaled, MR: d.mrB, Addr: d.mrB.Addr(), Length: 16 << 10,
		Access: engine.AccessRemoteWrite | engine.AccessRemoteRead})
	wc, _ := d.complete(d.cqB)
	d.step(err == nil && wc.Status == engine.WCSuccess && d.w1.RKey() == uint32(keys.Key(old).Inc()),
		"B: type 1 window over [0, 16 KiB) REMOTE_WRITE|REMOTE_READ: ibv_bind_mw rotates rkey 0x%08x -> 0x%08x", old, d.w1.RKey())
	return true
}

// writeAndRead WRITEs and READs through the type 1 window. Both can simply be tried again on a
// fresh connection.
func (d *demo) writeAndRead() {
	msg := "through a type 1 window"
	copy(d.bufA, msg)
	wc := d.onWire(func() engine.WC {
		return d.post(d.qa, d.cqA, engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, SGL: d.sgeA(0, 4096), RemoteAddr: d.mrB.Addr() + 256, RKey: d.w1.RKey()})
	}, nil)
	d.step(wc.Status == engine.WCSuccess && string(d.bufB[256:256+len(msg)]) == msg, "A: RDMA WRITE 4 KiB through rkey 0x%08x: %s, %q landed in B", d.w1.RKey(), wc.Status, msg)
	wc = d.onWire(func() engine.WC {
		return d.post(d.qa, d.cqA, engine.SendWR{ID: 3, Opcode: engine.WRRDMARead, SGL: d.sgeA(8192, 4096), RemoteAddr: d.mrB.Addr() + 256, RKey: d.w1.RKey()})
	}, nil)
	d.step(wc.Status == engine.WCSuccess && string(d.bufA[8192:8192+len(msg)]) == msg, "A: RDMA READ 4 KiB back (4 response packets): %s", wc.Status)
}

// bindType2 binds a type 2 window by a BIND_MW work request with the consumer's key8.
func (d *demo) bindType2() bool {
	var ok bool
	if d.w2, ok = d.allocMW(engine.MWType2); !ok {
		return false
	}
	old := d.w2.RKey()
	want := uint32(keys.Key(old).Inc())
	wc := d.post(d.qb, d.cqB, d.bindW2(4, want))
	d.w2Bound = wc.Status == engine.WCSuccess
	d.step(wc.Status == engine.WCSuccess && d.w2.RKey() == want, "B: type 2 window over one 8-byte word, REMOTE_ATOMIC: BIND_MW with key8 0x%02x: rkey 0x%08x -> 0x%08x (tied to QP 0x%06x)",
		uint8(want), old, d.w2.RKey(), d.qb.Num())
	return true
}

// atomics runs atomics through the type 2 window. An atomic is not idempotent: when its response
// is lost, A cannot tell whether it ran, so before A tries again B looks and puts its word back.
func (d *demo) atomics() {
	d.setWord(40)
	wc := d.onWire(func() engine.WC {
		binary.LittleEndian.PutUint64(d.bufA[16384:], 0)
		return d.post(d.qa, d.cqA, engine.SendWR{ID: 5, Opcode: engine.WRAtomicFetchAndAdd, SGL: d.sgeA(16384, 8), RemoteAddr: d.mrB.Addr() + wordOff, RKey: d.w2.RKey(), CompareAdd: 2})
	}, func() bool {
		d.undoAtomic(40, 42, "add")
		return true
	})
	got := binary.LittleEndian.Uint64(d.bufA[16384:])
	d.step(wc.Status == engine.WCSuccess && got == 40 && d.word() == 42, "A: FETCH_AND_ADD 2: %s, returned %d", wc.Status, got)
	wc = d.onWire(func() engine.WC {
		binary.LittleEndian.PutUint64(d.bufA[16392:], 0)
		return d.post(d.qa, d.cqA, engine.SendWR{ID: 6, Opcode: engine.WRAtomicCmpAndSwp, SGL: d.sgeA(16392, 8), RemoteAddr: d.mrB.Addr() + wordOff, RKey: d.w2.RKey(), CompareAdd: 42, Swap: 7})
	}, func() bool {
		d.undoAtomic(42, 7, "swap")
		return true
	})
	got = binary.LittleEndian.Uint64(d.bufA[16392:])
	d.step(wc.Status == engine.WCSuccess && got == 42 && d.word() == 7,
		"A: CMP_AND_SWP 42 -> 7: %s, returned %d; B's word is now %d", wc.Status, got, d.word())
}

// sendWithInv invalidates the type 2 window from A's side with SEND_WITH_INV, and returns the
// rkey invalidated. When only the ACKs are lost, B has the message and the window is invalid;
// sending it again would be refused, so A does not.
func (d *demo) sendWithInv() uint32 {
	var rwc engine.WC
	var received bool
	rkey2 := d.w2.RKey()
	copy(d.bufA[20000:], "done with your window")
	wc := d.onWire(func() engine.WC {
		if err := d.qb.PostRecv(engine.RecvWR{ID: 7, SGL: []engine.SGE{{Addr: d.mrB.Addr() + 48<<10, Length: 64, LKey: d.mrB.LKey()}}}); err != nil {
			return engine.WC{Status: engine.WCGeneralErr, Err: err}
		}
		rkey2 = d.w2.RKey()
		wc := d.post(d.qa, d.cqA, engine.SendWR{ID: 8, Opcode: engine.WRSendWithInv, SGL: d.sgeA(20000, 21), Imm: rkey2})
		if wc.Status == engine.WCSuccess {
			rwc, received = d.complete(d.cqB)
		}
		return wc
	}, func() bool {
		if d.cqB.Len() > 0 {
			rwc, received = d.complete(d.cqB)
			d.w2Bound = rwc.Status != engine.WCSuccess || rwc.Flags&engine.WCWithInv == 0
			d.explain("B got the message and invalidated rkey 0x%08x; only A's acknowledgements were lost, so A does not send it again", rkey2)
			return false
		}
		d.explain("B never got the message: its receive goes with the old QP, and B posts another on the new one")
		return true
	})
	ok := received && rwc.Status == engine.WCSuccess && rwc.Flags&engine.WCWithInv != 0 && rwc.InvalidatedRKey() == rkey2
	if ok {
		d.w2Bound = false
	}
	acks := ""
	if wc.Status != engine.WCSuccess {
		acks = fmt.Sprintf("; A's send completed %s", wc.Status)
	}
	d.step(ok && (wc.Status == engine.WCSuccess || wc.Status == engine.WCRetryExcErr),
		"A: SEND_WITH_INV rkey 0x%08x: B's receive completes %s with WITH_INV, invalidated rkey 0x%08x%s", rkey2, rwc.Status, rwc.InvalidatedRKey(), acks)
	return rkey2
}

// rebindAndInvalidate rebinds the type 2 window with a new key8, then invalidates it from B's
// side with LOCAL_INV.
func (d *demo) rebindAndInvalidate(rkey2 uint32) {
	want := uint32(keys.Key(rkey2).Inc())
	wc := d.post(d.qb, d.cqB, d.bindW2(9, want))
	d.step(wc.Status == engine.WCSuccess && d.w2.RKey() == want, "B: rebind the type 2 window with a new key8: rkey 0x%08x -> 0x%08x", rkey2, d.w2.RKey())
	wc = d.post(d.qb, d.cqB, engine.SendWR{ID: 10, Opcode: engine.WRLocalInv, Imm: d.w2.RKey()})
	d.step(wc.Status == engine.WCSuccess, "B: LOCAL_INV rkey 0x%08x: %s", d.w2.RKey(), wc.Status)
}

// freshConnection is what an application does after an error: a fresh connection, and the type
// 1 window, which belongs to B's PD rather than to a QP, serves it.
func (d *demo) freshConnection() {
	d.reconnect(false, false)
	msg := "over a fresh connection"
	copy(d.bufA[4096:], msg)
	wc := d.onWire(func() engine.WC {
		return d.post(d.qa, d.cqA, engine.SendWR{ID: 12, Opcode: engine.WRRDMAWrite, SGL: d.sgeA(4096, 64), RemoteAddr: d.mrB.Addr() + 1024, RKey: d.w1.RKey()})
	}, nil)
	d.step(wc.Status == engine.WCSuccess && string(d.bufB[1024:1024+len(msg)]) == msg,
		"A: a fresh QP pair, 0x%06x -> 0x%06x, then RDMA WRITE through rkey 0x%08x again: %s, %q landed in B",
		d.qa.Num(), d.qb.Num(), d.w1.RKey(), wc.Status, msg)
}

// undoAtomic reports, after an atomic's connection was lost, whether it ran at B (B's word went
// from before to after), and if it did puts the word back so that A's next try meets what the
// first one did.
func (d *demo) undoAtomic(before, after uint64, what string) {
	switch w := d.word(); w {
	case before:
		d.explain("B's word is still %d: the %s never reached B", w, what)
	case after:
		d.explain("B's word is %d: B did the %s and only its response was lost; an atomic is not idempotent, so B puts %d back before A tries again", w, what, before)
		d.setWord(before)
	default:
		d.explain("B's word is %d, neither %d nor %d", w, before, after)
	}
}

// staleRKey reads through the rkey that SEND_WITH_INV invalidated. B refuses it with NAK 0x62
// (remote access error) and its QP goes to ERR, as RC requires. If the NAK gets through, A's READ
// completes with REM_ACCESS_ERR. If the wire loses it, B, now in ERR, drops A's retries without an
// answer, and A's QP gives up with RETRY_EXC_ERR: what a real NIC does, and the one other
// legitimate outcome. A READ that never reached B at all is tried again on a fresh connection.
func (d *demo) staleRKey(stale uint32) {
	var wc engine.WC
	var mark int
	for n := 1; ; n++ {
		mark = len(d.events)
		wc = d.post(d.qa, d.cqA, engine.SendWR{ID: 11, Opcode: engine.WRRDMARead, SGL: d.sgeA(24000, 8), RemoteAddr: d.mrB.Addr() + wordOff, RKey: stale})
		if wc.Status != engine.WCRetryExcErr || n == maxConnections {
			break
		}
		d.settle()
		if d.qb.State() == engine.QPSErr {
			break
		}
		d.explain("the connection is lost: %s (%v) before the READ reached B, whose QP 0x%06x is still %s",
			wc.Status, wc.Err, d.qb.Num(), d.qb.State())
		d.reconnect(true, true)
	}
	var refusals []error
	for _, e := range d.events[mark:] {
		if e.Kind == engine.EvAccess && e.Device == "B" && e.QP == d.qb.Num() && e.Err != nil {
			refusals = append(refusals, e.Err)
		}
	}
	switch wc.Status {
	case engine.WCRetryExcErr:
		d.step(len(refusals) == 1 && d.qb.State() == engine.QPSErr && d.since(mark, "B", 0, engine.EvFault) > 0,
			"A: RDMA READ with the stale rkey 0x%08x: %s, because the wire lost B's NAK", stale, wc.Status)
	default:
		d.step(wc.Status == engine.WCRemAccessErr && len(refusals) == 1, "A: RDMA READ with the stale rkey 0x%08x: %s", stale, wc.Status)
	}
	for _, err := range refusals {
		d.explain("B refused it: %v", err)
	}
	if wc.Status == engine.WCRetryExcErr {
		d.explain("B's QP went to ERR when it sent the NAK, and dropped the %d retries of A's that reached it;",
			d.since(mark, "B", d.qb.Num(), engine.EvDrop))
		d.explain("A's QP gave up (%v), as a real NIC does:", wc.Err)
		d.explain("whether A sees REM_ACCESS_ERR or RETRY_EXC_ERR depends on whether the NAK gets through")
	}
	d.step(d.qa.State() == engine.QPSErr && d.qb.State() == engine.QPSErr, "both QPs are in %s, as RC requires after a remote access error", d.qa.State())
}

// cost prints what the run took: frames and bytes on the wire, virtual and wall time, and what
// the faults cost.
func (d *demo) cost(wall time.Duration, self, pcapPath string) {
	var frames, bytes uint64
	for _, dev := range []*engine.Device{d.a, d.b} {
		frames += dev.Stats().TxFrames
		bytes += dev.Stats().TxBytes
	}
	count := map[engine.EventKind]int{}
	for _, e := range d.events {
		count[e.Kind]++
	}
	fmt.Fprintf(d.out, "cost: %d frames, %d bytes on the wire, %v of virtual time (%v of wall time)\n", frames, bytes, d.sim.Now(), wall.Round(time.Microsecond))
	// NAKs are counted where they are sent, not from the events, which report each NAK at both
	// ends: so the count is the one decode -flows finds in the capture, lost NAKs included.
	fmt.Fprintf(d.out, "      faults %d, retransmissions %d, timeouts %d, NAKs %d (sequence %d, RNR %d), connections lost to RETRY_EXC_ERR %d\n",
		count[engine.EvFault], d.a.Stats().Retransmits+d.b.Stats().Retransmits, d.a.Stats().Timeouts+d.b.Stats().Timeouts, d.a.Stats().NAKsSent+d.b.Stats().NAKsSent,
		d.a.Stats().SeqNAKsSent+d.b.Stats().SeqNAKsSent, d.a.Stats().RNRNAKsSent+d.b.Stats().RNRNAKsSent, d.lost)
	if pcapPath != "" {
		fmt.Fprintf(d.out, "      every frame is in %s: %s, or open it in Wireshark\n", pcapPath, decodeHint(self, pcapPath))
	}
}

// selfCommand is how the user can run this program again from the directory they ran it in: the
// path they gave, or for the binary go run builds in a temporary directory, go run ./cmd/softirdma
// (the README runs the demo that way, from the top of the repository).
func selfCommand(argv0 string) string {
	if argv0 == "" || strings.Contains(filepath.ToSlash(argv0), "/go-build") {
		return "go run ./cmd/softirdma"
	}
	return shellQuote(argv0)
}

// decodeHint is the command that decodes the demo's capture.
func decodeHint(self, pcapPath string) string {
	hint := self + " decode " + shellQuote(pcapPath)
	if strings.HasPrefix(self, "go run ") {
		hint += " (make build gives bin/softirdma)"
	}
	return hint
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+=:,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// errWriter keeps the first write error, which the simulator's capture tap has nowhere to report.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
