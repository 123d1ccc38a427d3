package engine_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
)

var (
	soakSeeds = flag.Int("soak.seeds", 200, "how many seeds TestSoak runs (make soak runs thousands)")
	soakSeed  = flag.Uint64("soak.seed", 0, "run TestSoak for this one seed (to reproduce a failure)")
	soakTrace = flag.Bool("soak.trace", false, "print the engine's events of a failing seed")
)

// TestSoak runs random mixes of every data opcode in both directions between two devices (each
// is a requester and a responder at once) over a fabric that loses, duplicates, reorders and
// corrupts frames, and checks that every work request completes exactly once and successfully,
// that each receiver got every SEND in order, and that memory ends as a sequential model of the
// same requests predicts. Now and then a READ, WRITE or SEND is a long one, of up to several
// hundred packets. UD datagrams and UC messages cross the same link beside them (see
// soakUnreliable). A failure prints its seed; -soak.seed=N runs that seed alone.
func TestSoak(t *testing.T) {
	if *soakSeed != 0 {
		runSoak(t, *soakSeed)
		return
	}
	n := *soakSeeds
	if testing.Short() {
		n = 20
	}
	var stats soakStats
	for seed := uint64(1); seed <= uint64(n); seed++ {
		if !runSoak(t, seed, &stats) {
			t.Fatalf("seed %d failed; reproduce with: go test ./emu/engine -run TestSoak -soak.seed=%d", seed, seed)
		}
	}
	// The long messages the soak is there for did happen, of each kind and both ways.
	t.Logf("%d seeds, %d frames", n, stats.frames)
	for d := range stats.long {
		for k, c := range stats.long[d] {
			if n >= 100 && c.n == 0 {
				t.Errorf("no long %s from %s in %d seeds", soakLongKinds[k], "AB"[d:d+1], n)
			}
			t.Logf("long %s from %s: %d, the longest %d packets", soakLongKinds[k], "AB"[d:d+1], c.n, c.maxPkts)
		}
	}
	// UD and UC crossed the link, and the link cost them messages now and then.
	for k, c := range stats.unreliable {
		t.Logf("%s: %d messages sent, %d receives completed", []string{"UD", "UC"}[k], c.sent, c.delivered)
		if c.delivered == 0 || n >= 20 && c.delivered >= c.sent {
			t.Errorf("%s: %d of %d messages delivered in %d seeds", []string{"UD", "UC"}[k], c.delivered, c.sent, n)
		}
	}
}

var soakLongKinds = [...]string{"READ", "WRITE", "SEND"}

func soakLongKind(op engine.WROpcode) int {
	switch op {
	case engine.WRRDMARead:
		return 0
	case engine.WRRDMAWrite, engine.WRRDMAWriteWithImm:
		return 1
	}
	return 2
}

// soakStats is what the seeds did: frames sent, and the long messages by requester and kind
// (how many, and the longest in packets).
type soakStats struct {
	frames uint64
	// unreliable is UD and UC messages sent and delivered.
	unreliable [2]struct{ sent, delivered int }
	long       [2][len(soakLongKinds)]struct{ n, maxPkts int }
}

// Each device's buffer: what the peer's requests reach (a write region, a read region, atomic
// words and receive slots) and what its own requests use (sources, results). READs only read the
// read region (a READ may be executed again after later requests, so it must not share bytes with
// anything they write).
const (
	soakWriteOff  = 0
	soakWriteLen  = 1536 << 10
	soakReadOff   = soakWriteOff + soakWriteLen
	soakReadLen   = 1536 << 10
	soakAtomicOff = soakReadOff + soakReadLen
	soakAtomics   = 32
	soakSrcOff    = soakAtomicOff + 64<<10 // WRITE and SEND sources
	soakSrcLen    = 1536 << 10
	soakResultOff = soakSrcOff + soakSrcLen // READ and atomic results
	soakResultLen = 1792 << 10
	soakRecvOff   = soakResultOff + soakResultLen // receive slots, one per SEND or WRITE_WITH_IMM
	soakRecvLen   = 1792 << 10
	soakDgramOff  = soakRecvOff + soakRecvLen // UD and UC: sources on A, receive slots on B
	soakDgramLen  = 1 << 20
	soakConnOff   = soakDgramOff + soakDgramLen // connections through the connection manager
	soakConnLen   = 4 << 10
	soakBufLen    = soakConnOff + soakConnLen
	// A long message has 129 packets or more (past DefaultSendWindow), up to soakLongMax bytes.
	soakLongMax = 1 << 20
)

type soakOp struct {
	wr      engine.SendWR
	local   uint64 // offset in the requester's buffer of the data or result
	n       uint32
	expect  []byte // READ: the bytes; atomic: the original value
	recvIdx int    // SEND or WRITE_WITH_IMM: which receive it consumes, -1 otherwise
	long    bool
}

// soakRecv is a receive slot on the responder: where it is and, for a SEND, what must land.
type soakRecv struct {
	off, n uint64
	data   []byte
}

// soakDir is one direction's traffic: a requester, its peer, the work requests, and the peer's
// memory as the model predicts it.
type soakDir struct {
	name          string
	req, resp     *engine.QP
	reqMR, respMR *engine.MR
	reqBuf, rsBuf []byte
	reqCQ, rsCQ   *engine.CQ
	ops           []soakOp
	recvs         []soakRecv
	model         []byte // the peer's buffer up to soakSrcOff
	results, recv uint64 // space used in the result and receive areas
}

// soakPattern is the bytes buffers start from, made once (a per-byte loop is slow under the race
// detector; a copy is not); soakBufs are the buffers, used again by each seed in turn.
var (
	soakPattern = func() []byte {
		b := make([]byte, soakResultOff+256)
		fill(b, 0)
		return b
	}()
	soakBufs = [2][]byte{make([]byte, soakBufLen), make([]byte, soakBufLen)}
)

func runSoak(t *testing.T, seed uint64, stats ...*soakStats) bool {
	t.Helper()
	rnd := mrand.New(mrand.NewPCG(seed, 99))
	link := sim.LinkConfig{Loss: 0.02 + rnd.Float64()*0.05, Duplicate: rnd.Float64() * 0.03, Reorder: rnd.Float64() * 0.03, Corrupt: rnd.Float64() * 0.02}
	mtus := []engine.MTU{engine.MTU256, engine.MTU512, engine.MTU1024, engine.MTU2048, engine.MTU4096}
	o := engine.ConnectOptions{MTU: mtus[rnd.IntN(len(mtus))], Timeout: 8 + uint8(rnd.IntN(6)), RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: uint8(1 + rnd.IntN(8)), PSNA: rnd.Uint32() & engine.PSNMask, PSNB: rnd.Uint32() & engine.PSNMask}
	bufs := soakBufs
	for i, b := range bufs {
		copy(b[:soakResultOff], soakPattern[seed%251+uint64(i):])
		clear(b[soakResultOff:])
	}
	p := newPairWith(t, seed, link, o, bufs[0], bufs[1])
	if !*soakTrace {
		p.fab.OnEvent(nil) // describing every packet costs more than the soak itself
	}
	unreliable := newSoakUnreliable(p, rnd)
	mrs := [2]*engine.MR{p.mrA, p.mrB}
	for _, b := range bufs {
		for w := 0; w < soakAtomics; w++ {
			binary.LittleEndian.PutUint64(b[soakAtomicOff+8*w:], rnd.Uint64()%1000)
		}
	}
	dirs := [2]*soakDir{
		{name: "A", req: p.qa, resp: p.qb, reqMR: mrs[0], respMR: mrs[1], reqBuf: bufs[0], rsBuf: bufs[1], reqCQ: p.cqA, rsCQ: p.cqB},
		{name: "B", req: p.qb, resp: p.qa, reqMR: mrs[1], respMR: mrs[0], reqBuf: bufs[1], rsBuf: bufs[0], reqCQ: p.cqB, rsCQ: p.cqA},
	}
	mtu := uint64(o.MTU.Bytes())
	for di, d := range dirs {
		d.model = append([]byte(nil), d.rsBuf[:soakSrcOff]...)
		nops := 20 + rnd.IntN(40)
		for i := 0; i < nops; i++ {
			op := d.genOp(rnd, uint64(i+1), mtu)
			if op.long && len(stats) > 0 {
				c := &stats[0].long[di][soakLongKind(op.wr.Opcode)]
				c.n++
				c.maxPkts = max(c.maxPkts, int((uint64(op.n)+mtu-1)/mtu))
			}
			d.ops = append(d.ops, op)
		}
	}
	// Every SEND and WRITE_WITH_IMM needs a receive; post some now and the rest later, so RNR
	// NAKs happen too.
	postRecvs := func(d *soakDir, from, to int) {
		for i := from; i < to; i++ {
			r := d.recvs[i]
			must(t, d.resp.PostRecv(engine.RecvWR{ID: uint64(1000 + i), SGL: sge(d.respMR, r.off, uint32(r.n))}))
		}
	}
	for _, d := range dirs {
		postRecvs(d, 0, len(d.recvs)/2)
	}
	// Post in a few batches from both sides, with time in between.
	for i, j := 0, 0; i < len(dirs[0].ops) || j < len(dirs[1].ops); {
		for _, x := range []struct {
			d *soakDir
			k *int
		}{{dirs[0], &i}, {dirs[1], &j}} {
			end := min(len(x.d.ops), *x.k+rnd.IntN(16))
			for ; *x.k < end; *x.k++ {
				if err := x.d.req.PostSend(x.d.ops[*x.k].wr); err != nil {
					t.Errorf("seed %d: %s post %d: %v", seed, x.d.name, *x.k, err)
					return false
				}
			}
		}
		p.sim.RunFor(time.Duration(rnd.IntN(200)) * time.Microsecond)
	}
	p.sim.RunFor(2 * time.Millisecond)
	for _, d := range dirs {
		postRecvs(d, len(d.recvs)/2, len(d.recvs))
	}
	if n := p.sim.RunUntilIdle(50_000_000); n == 50_000_000 {
		t.Errorf("seed %d: still busy", seed)
		return false
	}
	fail := func(format string, args ...any) bool {
		if *soakTrace {
			for _, e := range p.events {
				t.Log(e)
			}
		}
		t.Errorf("seed %d (link %+v, %+v): %s", seed, link, o, fmt.Sprintf(format, args...))
		return false
	}
	// Each CQ holds its QP's send completions and its receive completions.
	var sendWCs, recvWCs [2][]engine.WC
	for i, cq := range []*engine.CQ{p.cqA, p.cqB} {
		for _, wc := range poll(cq) {
			if wc.Opcode == engine.WCRecv || wc.Opcode == engine.WCRecvRDMAWithImm {
				recvWCs[1-i] = append(recvWCs[1-i], wc) // the receives of the other side's requests
			} else {
				sendWCs[i] = append(sendWCs[i], wc)
			}
		}
	}
	for di, d := range dirs {
		if msg := d.check(sendWCs[di], recvWCs[di]); msg != "" {
			return fail("requests from %s: %s", d.name, msg)
		}
	}
	if p.qa.State() != engine.QPSRTS || p.qb.State() != engine.QPSRTS {
		return fail("states %s %s", p.qa.State(), p.qb.State())
	}
	if msg := unreliable.check(); msg != "" {
		return fail("UD and UC beside it: %s", msg)
	}
	if msg := soakConnections(p, rnd, seed); msg != "" {
		return fail("connections through rdma_cm after it: %s", msg)
	}
	if n := p.sim.Pending(); n != 0 {
		return fail("%d events still pending after the run", n)
	}
	if len(stats) > 0 {
		stats[0].frames += p.a.Stats().TxFrames + p.b.Stats().TxFrames
		for k, q := range [][]engine.SendWR{unreliable.ud.msgs, unreliable.uc.msgs} {
			stats[0].unreliable[k].sent += len(q)
			stats[0].unreliable[k].delivered += unreliable.delivered[k]
		}
	}
	return true
}

// genOp makes one random work request of the direction and updates the model.
func (d *soakDir) genOp(rnd *mrand.Rand, id, mtu uint64) soakOp {
	op := soakOp{recvIdx: -1}
	op.wr.ID = id
	if rnd.IntN(3) > 0 {
		op.wr.Flags = engine.SendSignaled
	}
	// size is a short message's length, or now and then a long one's: 129 packets or more.
	size := func(short int) uint32 {
		if rnd.IntN(64) > 0 {
			return uint32(rnd.IntN(short))
		}
		op.long = true
		pkts := uint64(129 + rnd.IntN(256))
		return uint32(min(pkts*mtu-uint64(rnd.IntN(int(mtu))), soakLongMax))
	}
	recv := func(n uint64, data []byte) bool {
		slot := (n + 64) &^ 63
		if d.recv+slot > soakRecvLen {
			return false
		}
		op.recvIdx = len(d.recvs)
		d.recvs = append(d.recvs, soakRecv{off: soakRecvOff + d.recv, n: slot, data: data})
		d.recv += slot
		return true
	}
	result := func(n uint64) bool {
		if d.results+n > soakResultLen {
			return false
		}
		op.local = soakResultOff + d.results
		d.results += n
		return true
	}
	for {
		switch k := rnd.IntN(7); k {
		case 0, 1: // SEND or SEND_WITH_IMM
			op.n = size(16 << 10)
			op.local = soakSrcOff + uint64(rnd.IntN(soakSrcLen-int(op.n)+1))
			data := d.reqBuf[op.local : op.local+uint64(op.n)]
			if !recv(uint64(op.n), data) {
				continue
			}
			op.wr.Opcode = engine.WRSend
			if k == 1 {
				op.wr.Opcode, op.wr.Imm = engine.WRSendWithImm, rnd.Uint32()
			}
			op.wr.SGL = sge(d.reqMR, op.local, op.n)
		case 2, 3: // WRITE or WRITE_WITH_IMM
			op.n = size(16 << 10)
			if k == 3 && !recv(0, nil) {
				continue
			}
			op.local = soakSrcOff + uint64(rnd.IntN(soakSrcLen-int(op.n)+1))
			dst := uint64(soakWriteOff + rnd.IntN(soakWriteLen-int(op.n)+1))
			op.wr.Opcode, op.wr.RemoteAddr, op.wr.RKey = engine.WRRDMAWrite, d.respMR.Addr()+dst, d.respMR.RKey()
			op.wr.SGL = sge(d.reqMR, op.local, op.n)
			copy(d.model[dst:], d.reqBuf[op.local:op.local+uint64(op.n)])
			if k == 3 {
				op.wr.Opcode, op.wr.Imm = engine.WRRDMAWriteWithImm, rnd.Uint32()
			}
		case 4: // READ
			op.n = size(16 << 10)
			if !result(uint64(op.n)) {
				continue
			}
			src := uint64(soakReadOff + rnd.IntN(soakReadLen-int(op.n)+1))
			op.wr.Opcode, op.wr.RemoteAddr, op.wr.RKey = engine.WRRDMARead, d.respMR.Addr()+src, d.respMR.RKey()
			op.wr.SGL = sge(d.reqMR, op.local, op.n)
			op.expect = append([]byte(nil), d.model[src:src+uint64(op.n)]...)
		default: // atomics
			if !result(8) {
				continue
			}
			w := soakAtomicOff + 8*rnd.IntN(soakAtomics)
			op.n = 8
			op.wr.RemoteAddr, op.wr.RKey = d.respMR.Addr()+uint64(w), d.respMR.RKey()
			op.wr.SGL = sge(d.reqMR, op.local, 8)
			orig := binary.LittleEndian.Uint64(d.model[w:])
			if k == 5 {
				op.wr.Opcode, op.wr.CompareAdd = engine.WRAtomicFetchAndAdd, rnd.Uint64()%10
				binary.LittleEndian.PutUint64(d.model[w:], orig+op.wr.CompareAdd)
			} else {
				op.wr.Opcode, op.wr.Swap = engine.WRAtomicCmpAndSwp, rnd.Uint64()%1000
				op.wr.CompareAdd = orig
				if rnd.IntN(2) == 0 {
					op.wr.CompareAdd++ // a compare that fails
				} else {
					binary.LittleEndian.PutUint64(d.model[w:], op.wr.Swap)
				}
			}
			op.expect = binary.LittleEndian.AppendUint64(nil, orig)
		}
		return op
	}
}

// check compares what happened in the direction with the model: the requester's completions
// (every signalled WR once, in order, successful) and results, the responder's receives (in
// order, with the bytes sent) and memory. It returns what differs, or "".
func (d *soakDir) check(sends, recvs []engine.WC) string {
	i := 0
	for _, op := range d.ops {
		if op.wr.Flags&engine.SendSignaled == 0 {
			continue
		}
		if i >= len(sends) {
			return fmt.Sprintf("wr %d never completed (%d completions)", op.wr.ID, len(sends))
		}
		wc := sends[i]
		i++
		if wc.WRID != op.wr.ID || wc.Status != engine.WCSuccess || wc.Opcode != engine.WCOpcodeOf(op.wr.Opcode) || wc.ByteLen != op.n {
			return fmt.Sprintf("completion %d: %s, want wr %d %s SUCCESS len %d", i-1, fmtWC([]engine.WC{wc}), op.wr.ID, engine.WCOpcodeOf(op.wr.Opcode), op.n)
		}
	}
	if i != len(sends) {
		return fmt.Sprintf("%d extra completions: %s", len(sends)-i, fmtWC(sends[i:]))
	}
	for _, op := range d.ops {
		if op.expect != nil && !bytes.Equal(d.reqBuf[op.local:op.local+uint64(op.n)], op.expect) {
			return fmt.Sprintf("wr %d %s of %d bytes: local result differs", op.wr.ID, op.wr.Opcode, op.n)
		}
	}
	if len(recvs) != len(d.recvs) {
		return fmt.Sprintf("%d receive completions, want %d", len(recvs), len(d.recvs))
	}
	for _, op := range d.ops {
		if op.recvIdx < 0 {
			continue
		}
		k := op.recvIdx
		wc, r := recvs[k], d.recvs[k]
		if wc.WRID != uint64(1000+k) || wc.Status != engine.WCSuccess {
			return fmt.Sprintf("receive %d: %s", k, fmtWC([]engine.WC{wc}))
		}
		if op.wr.Opcode == engine.WRSend || op.wr.Opcode == engine.WRSendWithImm {
			slot := d.rsBuf[r.off : r.off+uint64(op.n)]
			if wc.ByteLen != op.n || !bytes.Equal(slot, r.data) {
				return fmt.Sprintf("receive %d: %d bytes, want %d, data equal %v", k, wc.ByteLen, op.n, bytes.Equal(slot, r.data))
			}
		}
		if op.wr.Opcode != engine.WRSend && wc.Imm != op.wr.Imm {
			return fmt.Sprintf("receive %d: imm %#x want %#x", k, wc.Imm, op.wr.Imm)
		}
	}
	if !bytes.Equal(d.rsBuf[:soakSrcOff], d.model) {
		for j := range d.model {
			if d.rsBuf[j] != d.model[j] {
				return fmt.Sprintf("remote memory differs from the model first at offset %d", j)
			}
		}
	}
	return ""
}
