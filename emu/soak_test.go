package emu

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"
)

var (
	soakSeeds = flag.Int("soak.seeds", 200, "how many seeds TestSoak runs (make soak runs thousands)")
	soakSeed  = flag.Uint64("soak.seed", 0, "run TestSoak for this one seed (to reproduce a failure)")
	soakTrace = flag.Bool("soak.trace", false, "print the engine's events of a failing seed")
)

// TestSoak runs random mixes of every data opcode between two devices over a fabric that
// loses, duplicates, reorders and corrupts frames, and checks that every work request completes
// exactly once and successfully, that the receiver got every SEND in order, and that memory ends
// as a sequential model of the same requests predicts. A failure prints its seed;
// -soak.seed=N runs that seed alone.
func TestSoak(t *testing.T) {
	if *soakSeed != 0 {
		runSoak(t, *soakSeed)
		return
	}
	n := *soakSeeds
	if testing.Short() {
		n = 20
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		if !runSoak(t, seed) {
			t.Fatalf("seed %d failed; reproduce with: go test ./emu -run TestSoak -soak.seed=%d", seed, seed)
		}
	}
}

// Remote memory regions: READs only read the read region (a READ may be executed again after
// later requests, so it must not share bytes with anything they write), WRITEs go to the write
// region, atomics to their own words.
const (
	soakWriteOff  = 0
	soakWriteLen  = 64 << 10
	soakReadOff   = 64 << 10
	soakReadLen   = 64 << 10
	soakAtomicOff = 128 << 10
	soakAtomics   = 32
	soakRecvOff   = 256 << 10 // B's receive buffers, one slot per SEND
	soakRecvSlot  = 16 << 10
)

type soakOp struct {
	wr      SendWR
	local   uint64 // offset in A's buffer of the data or result
	n       uint32
	expect  []byte // READ: the bytes; atomic: the original value
	recvIdx int    // SEND: which receive it lands in, -1 otherwise
}

func runSoak(t *testing.T, seed uint64) bool {
	t.Helper()
	rnd := mrand.New(mrand.NewPCG(seed, 99))
	link := LinkConfig{Loss: 0.02 + rnd.Float64()*0.05, Duplicate: rnd.Float64() * 0.03, Reorder: rnd.Float64() * 0.03, Corrupt: rnd.Float64() * 0.02}
	mtus := []MTU{MTU256, MTU512, MTU1024, MTU2048, MTU4096}
	o := ConnectOptions{MTU: mtus[rnd.IntN(len(mtus))], Timeout: 8 + uint8(rnd.IntN(6)), RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: uint8(1 + rnd.IntN(8)), PSNA: rnd.Uint32() & psnMask, PSNB: rnd.Uint32() & psnMask}
	p := newPair(t, seed, link, o)
	fill(p.bufB[soakReadOff:soakReadOff+soakReadLen], byte(seed))
	for i := 0; i < soakAtomics; i++ {
		binary.LittleEndian.PutUint64(p.bufB[soakAtomicOff+8*i:], rnd.Uint64()%1000)
	}
	fill(p.bufA[:512<<10], byte(seed>>3)+1)

	model := make([]byte, len(p.bufB))
	copy(model, p.bufB)
	var ops []soakOp
	var sends [][]byte
	nops := 40 + rnd.IntN(80)
	localResult := uint64(600 << 10) // A-side offsets for READ and atomic results
	for i := 0; i < nops; i++ {
		op := soakOp{recvIdx: -1}
		op.wr.ID = uint64(i + 1)
		if rnd.IntN(3) > 0 {
			op.wr.Flags = SendSignaled
		}
		switch k := rnd.IntN(7); k {
		case 0, 1: // SEND or SEND_WITH_IMM
			op.n = uint32(rnd.IntN(soakRecvSlot))
			op.local = uint64(rnd.IntN(256 << 10))
			op.wr.Opcode = WRSend
			if k == 1 {
				op.wr.Opcode, op.wr.Imm = WRSendWithImm, rnd.Uint32()
			}
			op.recvIdx = len(sends)
			sends = append(sends, p.bufA[op.local:op.local+uint64(op.n)])
			op.wr.SGL = sge(p.mrA, op.local, op.n)
		case 2, 3: // WRITE or WRITE_WITH_IMM
			op.n = uint32(rnd.IntN(16 << 10))
			op.local = uint64(rnd.IntN(256 << 10))
			dst := uint64(soakWriteOff + rnd.IntN(soakWriteLen-int(op.n)+1))
			op.wr.Opcode, op.wr.RemoteAddr, op.wr.RKey = WRRDMAWrite, p.mrB.Addr()+dst, p.mrB.RKey()
			op.wr.SGL = sge(p.mrA, op.local, op.n)
			copy(model[dst:], p.bufA[op.local:op.local+uint64(op.n)])
			if k == 3 {
				op.wr.Opcode, op.wr.Imm = WRRDMAWriteWithImm, rnd.Uint32()
				op.recvIdx = len(sends)
				sends = append(sends, nil)
			}
		case 4: // READ
			op.n = uint32(rnd.IntN(16 << 10))
			src := uint64(soakReadOff + rnd.IntN(soakReadLen-int(op.n)+1))
			op.local, localResult = localResult, localResult+uint64(op.n)
			op.wr.Opcode, op.wr.RemoteAddr, op.wr.RKey = WRRDMARead, p.mrB.Addr()+src, p.mrB.RKey()
			op.wr.SGL = sge(p.mrA, op.local, op.n)
			op.expect = append([]byte(nil), model[src:src+uint64(op.n)]...)
		default: // atomics
			w := soakAtomicOff + 8*rnd.IntN(soakAtomics)
			op.n = 8
			op.local, localResult = localResult, localResult+8
			op.wr.RemoteAddr, op.wr.RKey = p.mrB.Addr()+uint64(w), p.mrB.RKey()
			op.wr.SGL = sge(p.mrA, op.local, 8)
			orig := binary.LittleEndian.Uint64(model[w:])
			if k == 5 {
				op.wr.Opcode, op.wr.CompareAdd = WRAtomicFetchAndAdd, rnd.Uint64()%10
				binary.LittleEndian.PutUint64(model[w:], orig+op.wr.CompareAdd)
			} else {
				op.wr.Opcode, op.wr.Swap = WRAtomicCmpAndSwp, rnd.Uint64()%1000
				op.wr.CompareAdd = orig
				if rnd.IntN(2) == 0 {
					op.wr.CompareAdd++ // a compare that fails
				} else {
					binary.LittleEndian.PutUint64(model[w:], op.wr.Swap)
				}
			}
			op.expect = binary.LittleEndian.AppendUint64(nil, orig)
		}
		ops = append(ops, op)
	}
	// Every SEND (and WRITE_WITH_IMM) needs a receive; post some now and the rest later, so
	// RNR NAKs happen too.
	early := len(sends) / 2
	for i := 0; i < early; i++ {
		must(t, p.qb.PostRecv(RecvWR{ID: uint64(1000 + i), SGL: sge(p.mrB, uint64(soakRecvOff+i*soakRecvSlot), soakRecvSlot)}))
	}
	// Post in a few batches with time in between.
	for i := 0; i < len(ops); {
		j := min(len(ops), i+1+rnd.IntN(16))
		for ; i < j; i++ {
			if err := p.qa.PostSend(ops[i].wr); err != nil {
				t.Errorf("seed %d: post %d: %v", seed, i, err)
				return false
			}
		}
		p.sim.RunFor(time.Duration(rnd.IntN(200)) * time.Microsecond)
	}
	p.sim.RunFor(2 * time.Millisecond)
	for i := early; i < len(sends); i++ {
		must(t, p.qb.PostRecv(RecvWR{ID: uint64(1000 + i), SGL: sge(p.mrB, uint64(soakRecvOff+i*soakRecvSlot), soakRecvSlot)}))
	}
	if n := p.sim.RunUntilIdle(20_000_000); n == 20_000_000 {
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

	// Requester completions: every signalled WR once, in order, successful.
	got := poll(p.cqA)
	i := 0
	for _, op := range ops {
		if op.wr.Flags&SendSignaled == 0 {
			continue
		}
		if i >= len(got) {
			return fail("wr %d never completed (%d completions)", op.wr.ID, len(got))
		}
		wc := got[i]
		i++
		if wc.WRID != op.wr.ID || wc.Status != WCSuccess || wc.Opcode != wcOpcodeOf(op.wr.Opcode) {
			return fail("completion %d: %s, want wr %d %s SUCCESS", i-1, fmtWC([]WC{wc}), op.wr.ID, wcOpcodeOf(op.wr.Opcode))
		}
	}
	if i != len(got) {
		return fail("%d extra completions: %s", len(got)-i, fmtWC(got[i:]))
	}
	// Results on A.
	for _, op := range ops {
		if op.expect != nil && !bytes.Equal(p.bufA[op.local:op.local+uint64(op.n)], op.expect) {
			return fail("wr %d %s: local result differs", op.wr.ID, op.wr.Opcode)
		}
	}
	// Receives on B, in order.
	recvs := poll(p.cqB)
	if len(recvs) != len(sends) {
		return fail("%d receive completions, want %d", len(recvs), len(sends))
	}
	k := 0
	for _, op := range ops {
		if op.recvIdx < 0 {
			continue
		}
		wc := recvs[k]
		if wc.WRID != uint64(1000+k) || wc.Status != WCSuccess {
			return fail("receive %d: %s", k, fmtWC([]WC{wc}))
		}
		if op.wr.Opcode == WRSend || op.wr.Opcode == WRSendWithImm {
			slot := p.bufB[soakRecvOff+k*soakRecvSlot:]
			if wc.ByteLen != op.n || !bytes.Equal(slot[:op.n], sends[k]) {
				return fail("receive %d: %d bytes, want %d, data equal %v", k, wc.ByteLen, op.n, bytes.Equal(slot[:op.n], sends[k]))
			}
		}
		if op.wr.Opcode != WRSend && wc.Imm != op.wr.Imm {
			return fail("receive %d: imm %#x want %#x", k, wc.Imm, op.wr.Imm)
		}
		k++
	}
	// B's memory, but for the receive slots.
	if !bytes.Equal(p.bufB[:soakRecvOff], model[:soakRecvOff]) {
		for j := 0; j < soakRecvOff; j++ {
			if p.bufB[j] != model[j] {
				return fail("remote memory differs from the model first at offset %d", j)
			}
		}
	}
	if p.qa.State() != QPSRTS || p.qb.State() != QPSRTS {
		return fail("states %s %s", p.qa.State(), p.qb.State())
	}
	if n := p.sim.Pending(); n != 0 {
		return fail("%d events still pending after the run", n)
	}
	return true
}
