package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/softirdma/softirdma/emu"
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

func demoMain(args []string, stdout, stderr io.Writer, env demoEnv) int {
	fs := newFlagSet("demo", stderr)
	seed := fs.Uint64("seed", 1, "seed for every random choice (key8 values, faults); the same seed gives the same run and pcap")
	loss := fs.Float64("loss", 0, "probability that the simulated wire loses a frame, each way (0 to 0.5)")
	pcapPath := fs.String("pcap", "", "write every frame on the wire to this pcap file")
	trace := fs.Bool("trace", false, "print every event of the engine (QP states, packets, NAKs, retries, faults)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma demo [-seed N] [-loss P] [-pcap FILE] [-trace]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Two softirdma devices, A and B, on a simulated RoCEv2 wire with one RC connection.")
		fmt.Fprintln(stderr, "B registers memory and binds type 1 and type 2 memory windows (watch the rkeys rotate);")
		fmt.Fprintln(stderr, "A writes, reads and runs atomics through them, invalidates a window with SEND_WITH_INV,")
		fmt.Fprintln(stderr, "and meets a stale rkey. Exits 0 only when every step got the expected result.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softirdma demo: unexpected argument %q\n", fs.Arg(0))
		return 2
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
		defer f.Close()
		pcap = f
	}
	start := env.now()
	if err := d.setup(*seed, *loss, pcap); err != nil {
		fmt.Fprintf(stderr, "softirdma demo: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "softirdma demo, seed %d, loss %g: devices A (%s) and B (%s), RC QP 0x%06x -> 0x%06x, MTU 1024\n\n",
		*seed, *loss, d.a.IP(), d.b.IP(), d.qa.Num(), d.qb.Num())
	d.run()
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

	sim      *emu.Sim
	fab      *emu.Fabric
	a, b     *emu.Device
	pdA, pdB *emu.PD
	cqA, cqB *emu.CQ
	qa, qb   *emu.QP
	bufA     []byte
	bufB     []byte
	mrA, mrB *emu.MR
	events   []emu.Event
}

func (d *demo) setup(seed uint64, loss float64, pcap io.Writer) error {
	d.sim = emu.NewSim()
	d.fab = emu.NewFabric(d.sim, seed)
	d.fab.OnEvent(func(e emu.Event) {
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
	link := emu.LinkConfig{Loss: loss, Rate: 10e9}
	d.a = d.fab.AddDevice("A", link)
	d.b = d.fab.AddDevice("B", link)
	var err error
	check := func(e error) {
		if err == nil {
			err = e
		}
	}
	d.pdA, err = d.a.AllocPD()
	check(err)
	d.pdB, err = d.b.AllocPD()
	check(err)
	d.cqA, err = d.a.CreateCQ(256)
	check(err)
	d.cqB, err = d.b.CreateCQ(256)
	check(err)
	if err != nil {
		return err
	}
	caps := emu.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}
	d.qa, err = d.pdA.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: d.cqA, RecvCQ: d.cqA, Cap: caps})
	check(err)
	d.qb, err = d.pdB.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: d.cqB, RecvCQ: d.cqB, Cap: caps})
	check(err)
	if err != nil {
		return err
	}
	check(emu.ConnectRC(d.qa, d.qb, emu.ConnectOptions{MTU: emu.MTU1024, Timeout: 10}))
	d.bufA, d.bufB = make([]byte, 64<<10), make([]byte, 64<<10)
	d.mrA, err = d.pdA.RegMR(d.bufA, emu.AccessLocalWrite)
	check(err)
	return err
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
func (d *demo) complete(cq *emu.CQ) (emu.WC, bool) {
	var wc [1]emu.WC
	ok := d.sim.RunUntil(func() bool { return cq.Len() > 0 })
	if !ok {
		return emu.WC{}, false
	}
	cq.Poll(wc[:])
	return wc[0], true
}

// post posts one send WR on qp, runs until it completes on cq, and returns the completion.
func (d *demo) post(qp *emu.QP, cq *emu.CQ, wr emu.SendWR) emu.WC {
	wr.Flags |= emu.SendSignaled
	if err := qp.PostSend(wr); err != nil {
		return emu.WC{Status: emu.WCGeneralErr, Err: err}
	}
	wc, _ := d.complete(cq)
	return wc
}

func (d *demo) sgeA(off uint64, n uint32) []emu.SGE {
	return []emu.SGE{{Addr: d.mrA.Addr() + off, Length: n, LKey: d.mrA.LKey()}}
}

func (d *demo) run() {
	var err error
	// B's memory: LOCAL_WRITE|MW_BIND and no remote rights of its own; windows grant them.
	d.mrB, err = d.pdB.RegMR(d.bufB, emu.AccessLocalWrite|emu.AccessMWBind)
	d.step(err == nil, "B: reg_mr 64 KiB at 0x%x, LOCAL_WRITE|MW_BIND: lkey = rkey = 0x%08x; the MR itself grants no remote access",
		d.mrB.Addr(), d.mrB.RKey())
	if err != nil {
		d.explain("%v", err)
		return
	}

	// A type 1 window, bound by the bind verb: key8 + 1.
	w1, err := d.pdB.AllocMW(emu.MWType1)
	if err != nil {
		d.step(false, "B: alloc_mw type 1: %v", err)
		return
	}
	old := w1.RKey()
	err = d.qb.BindMW(w1, emu.MWBind{ID: 1, Flags: emu.SendSignaled, MR: d.mrB, Addr: d.mrB.Addr(), Length: 16 << 10,
		Access: emu.AccessRemoteWrite | emu.AccessRemoteRead})
	wc, _ := d.complete(d.cqB)
	d.step(err == nil && wc.Status == emu.WCSuccess && w1.RKey() == uint32(keys.Key(old).Inc()),
		"B: type 1 window over [0, 16 KiB) REMOTE_WRITE|REMOTE_READ: ibv_bind_mw rotates rkey 0x%08x -> 0x%08x", old, w1.RKey())

	// WRITE and READ through it.
	msg := "through a type 1 window"
	copy(d.bufA, msg)
	wc = d.post(d.qa, d.cqA, emu.SendWR{ID: 2, Opcode: emu.WRRDMAWrite, SGL: d.sgeA(0, 4096), RemoteAddr: d.mrB.Addr() + 256, RKey: w1.RKey()})
	d.step(wc.Status == emu.WCSuccess && string(d.bufB[256:256+len(msg)]) == msg, "A: RDMA WRITE 4 KiB through rkey 0x%08x: %s, %q landed in B", w1.RKey(), wc.Status, msg)
	wc = d.post(d.qa, d.cqA, emu.SendWR{ID: 3, Opcode: emu.WRRDMARead, SGL: d.sgeA(8192, 4096), RemoteAddr: d.mrB.Addr() + 256, RKey: w1.RKey()})
	d.step(wc.Status == emu.WCSuccess && string(d.bufA[8192:8192+len(msg)]) == msg, "A: RDMA READ 4 KiB back (4 response packets): %s", wc.Status)

	// A type 2 window, bound by a BIND_MW work request with the consumer's key8.
	w2, err := d.pdB.AllocMW(emu.MWType2)
	if err != nil {
		d.step(false, "B: alloc_mw type 2: %v", err)
		return
	}
	old = w2.RKey()
	want := uint32(keys.Key(old).Inc())
	wc = d.post(d.qb, d.cqB, emu.SendWR{ID: 4, Opcode: emu.WRBindMW, Bind: emu.BindInfo{MW: w2, RKey: want, MR: d.mrB,
		Addr: d.mrB.Addr() + 32<<10, Length: 8, Access: emu.AccessRemoteAtomic | emu.AccessRemoteRead}})
	d.step(wc.Status == emu.WCSuccess && w2.RKey() == want, "B: type 2 window over one 8-byte word, REMOTE_ATOMIC: BIND_MW with key8 0x%02x: rkey 0x%08x -> 0x%08x (tied to QP 0x%06x)",
		uint8(want), old, w2.RKey(), d.qb.Num())

	// Atomics through it.
	binary.LittleEndian.PutUint64(d.bufB[32<<10:], 40)
	wc = d.post(d.qa, d.cqA, emu.SendWR{ID: 5, Opcode: emu.WRAtomicFetchAndAdd, SGL: d.sgeA(16384, 8), RemoteAddr: d.mrB.Addr() + 32<<10, RKey: w2.RKey(), CompareAdd: 2})
	got := binary.LittleEndian.Uint64(d.bufA[16384:])
	d.step(wc.Status == emu.WCSuccess && got == 40, "A: FETCH_AND_ADD 2: %s, returned %d", wc.Status, got)
	wc = d.post(d.qa, d.cqA, emu.SendWR{ID: 6, Opcode: emu.WRAtomicCmpAndSwp, SGL: d.sgeA(16392, 8), RemoteAddr: d.mrB.Addr() + 32<<10, RKey: w2.RKey(), CompareAdd: 42, Swap: 7})
	got = binary.LittleEndian.Uint64(d.bufA[16392:])
	d.step(wc.Status == emu.WCSuccess && got == 42 && binary.LittleEndian.Uint64(d.bufB[32<<10:]) == 7,
		"A: CMP_AND_SWP 42 -> 7: %s, returned %d; B's word is now %d", wc.Status, got, binary.LittleEndian.Uint64(d.bufB[32<<10:]))

	// SEND_WITH_INV invalidates the window from A's side.
	if err := d.qb.PostRecv(emu.RecvWR{ID: 7, SGL: []emu.SGE{{Addr: d.mrB.Addr() + 48<<10, Length: 64, LKey: d.mrB.LKey()}}}); err != nil {
		d.step(false, "B: post_recv: %v", err)
		return
	}
	rkey2 := w2.RKey()
	copy(d.bufA[20000:], "done with your window")
	wc = d.post(d.qa, d.cqA, emu.SendWR{ID: 8, Opcode: emu.WRSendWithInv, SGL: d.sgeA(20000, 21), Imm: rkey2})
	rwc, _ := d.complete(d.cqB)
	d.step(wc.Status == emu.WCSuccess && rwc.Status == emu.WCSuccess && rwc.Flags&emu.WCWithInv != 0 && rwc.InvalidatedRKey() == rkey2,
		"A: SEND_WITH_INV rkey 0x%08x: B's receive completes %s with WITH_INV, invalidated rkey 0x%08x", rkey2, rwc.Status, rwc.InvalidatedRKey())

	// Rebind with a new key8, then LOCAL_INV from B's side.
	want = uint32(keys.Key(rkey2).Inc())
	wc = d.post(d.qb, d.cqB, emu.SendWR{ID: 9, Opcode: emu.WRBindMW, Bind: emu.BindInfo{MW: w2, RKey: want, MR: d.mrB,
		Addr: d.mrB.Addr() + 32<<10, Length: 8, Access: emu.AccessRemoteAtomic | emu.AccessRemoteRead}})
	d.step(wc.Status == emu.WCSuccess && w2.RKey() == want, "B: rebind the type 2 window with a new key8: rkey 0x%08x -> 0x%08x", rkey2, w2.RKey())
	wc = d.post(d.qb, d.cqB, emu.SendWR{ID: 10, Opcode: emu.WRLocalInv, Imm: w2.RKey()})
	d.step(wc.Status == emu.WCSuccess, "B: LOCAL_INV rkey 0x%08x: %s", w2.RKey(), wc.Status)

	// The stale rkey: REM_ACCESS_ERR, NAK 0x62, and the reason from B's side.
	stale := rkey2
	wc = d.post(d.qa, d.cqA, emu.SendWR{ID: 11, Opcode: emu.WRRDMARead, SGL: d.sgeA(24000, 8), RemoteAddr: d.mrB.Addr() + 32<<10, RKey: stale})
	d.step(wc.Status == emu.WCRemAccessErr, "A: RDMA READ with the stale rkey 0x%08x: %s", stale, wc.Status)
	for _, e := range d.events {
		if e.Kind == emu.EvAccess && e.Device == "B" && e.Err != nil {
			d.explain("B refused it: %v", e.Err)
		}
	}
	d.step(d.qa.State() == emu.QPSErr && d.qb.State() == emu.QPSErr, "both QPs are in %s, as RC requires after a remote access error", d.qa.State())
}

// cost prints what the run took: frames and bytes on the wire, virtual and wall time, and what
// the faults cost.
func (d *demo) cost(wall time.Duration, self, pcapPath string) {
	var frames, bytes uint64
	for _, dev := range []*emu.Device{d.a, d.b} {
		frames += dev.Stats.TxFrames
		bytes += dev.Stats.TxBytes
	}
	count := map[emu.EventKind]int{}
	for _, e := range d.events {
		count[e.Kind]++
	}
	fmt.Fprintf(d.out, "cost: %d frames, %d bytes on the wire, %v of virtual time (%v of wall time)\n", frames, bytes, d.sim.Now(), wall.Round(time.Microsecond))
	fmt.Fprintf(d.out, "      faults %d, retransmissions %d, timeouts %d, NAKs %d (sequence %d, RNR %d)\n",
		count[emu.EvFault], d.a.Stats.Retransmits+d.b.Stats.Retransmits, d.a.Stats.Timeouts+d.b.Stats.Timeouts, count[emu.EvNAK],
		d.a.Stats.SeqNAKsSent+d.b.Stats.SeqNAKsSent, d.a.Stats.RNRNAKsSent+d.b.Stats.RNRNAKsSent)
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
