package engine_test

import (
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
)

var benchSizes = []struct {
	name string
	n    int
}{{"8B", 8}, {"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

// BenchmarkCopy is the first baseline: a plain copy of the message.
func BenchmarkCopy(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			src, dst := make([]byte, s.n), make([]byte, s.n)
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkIdealPipe is the second baseline: the physical limit of an honest RoCE datapath.
// Per MTU-sized packet: one copy into a frame buffer, the ICRC computed, the ICRC verified, one
// copy out; nothing else.
func BenchmarkIdealPipe(b *testing.B) {
	const mtu = 4096
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			src, dst := make([]byte, s.n), make([]byte, s.n)
			frame := make([]byte, mtu+80)
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			for b.Loop() {
				for off := 0; off < s.n; off += mtu {
					n := min(mtu, s.n-off)
					copy(frame[76:], src[off:off+n])
					sum := crc32.ChecksumIEEE(frame[:76+n])
					if crc32.ChecksumIEEE(frame[:76+n]) != sum {
						b.Fatal("crc")
					}
					copy(dst[off:off+n], frame[76:76+n])
				}
			}
		})
	}
}

// benchPair is two devices at MTU 4096 with events off, the way a benchmark wants them.
func benchPair(b *testing.B, size int) *pair {
	p := &pair{t: b, sim: sim.NewSim()}
	p.fab = sim.NewFabric(p.sim, 1)
	p.a = p.fab.AddDevice("A", sim.LinkConfig{})
	p.b = p.fab.AddDevice("B", sim.LinkConfig{})
	var err error
	p.pdA, _ = p.a.AllocPD()
	p.pdB, _ = p.b.AllocPD()
	p.cqA, _ = p.a.CreateCQ(1024)
	p.cqB, _ = p.b.CreateCQ(1024)
	caps := engine.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}
	p.qa, err = p.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqA, RecvCQ: p.cqA, Cap: caps})
	must(b, err)
	p.qb, err = p.pdB.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqB, RecvCQ: p.cqB, Cap: caps})
	must(b, err)
	must(b, engine.ConnectRC(p.qa, p.qb, engine.ConnectOptions{MTU: engine.MTU4096}))
	all := engine.AccessLocalWrite | engine.AccessRemoteWrite | engine.AccessRemoteRead | engine.AccessMWBind
	p.bufA, p.bufB = make([]byte, size), make([]byte, size)
	p.mrA, err = p.pdA.RegMR(p.bufA, all)
	must(b, err)
	p.mrB, err = p.pdB.RegMR(p.bufB, all)
	must(b, err)
	return p
}

// roundTrip posts wr, runs the simulator until its completion, and polls it.
func (p *pair) roundTrip(b *testing.B, wr *engine.SendWR, wc []engine.WC) {
	if err := p.roundTrips(wr, wc, 1); err != nil {
		b.Fatal(err)
	}
}

// roundTrips is n round trips of wr, for a goroutine other than the benchmark's.
func (p *pair) roundTrips(wr *engine.SendWR, wc []engine.WC, n int) error {
	for range n {
		if err := p.qa.PostSend(*wr); err != nil {
			return err
		}
		for p.cqA.Len() == 0 {
			if !p.sim.Step() {
				return errors.New("no completion")
			}
		}
		p.cqA.Poll(wc)
		if wc[0].Status != engine.WCSuccess {
			return errors.New(fmtWC(wc[:1]))
		}
	}
	return nil
}

func benchRC(b *testing.B, op engine.WROpcode) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			p := benchPair(b, s.n)
			wr := engine.SendWR{ID: 1, Opcode: op, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, uint32(s.n)), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
			wc := make([]engine.WC, 1)
			p.roundTrip(b, &wr, wc) // warm up: buffers, timers
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			for b.Loop() {
				p.roundTrip(b, &wr, wc)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkRCWrite is RDMA WRITE between two devices on the simulated fabric: MTU 4096, ICRC
// built and checked, every key checked, one WRITE at a time.
func BenchmarkRCWrite(b *testing.B) { benchRC(b, engine.WRRDMAWrite) }

// BenchmarkRCWriteParallel is 64 KiB RDMA WRITEs on two device pairs at once, each pair on a
// simulator and a goroutine of its own (GOMAXPROCS 2), beside one pair alone in the same run:
// what a second core gives engines that share nothing. x-1pair is the two pairs' throughput over
// the one's: 2 at best, on two idle cores.
func BenchmarkRCWriteParallel(b *testing.B) {
	const n = 64 << 10
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var pairs [2]*pair
	var wrs [2]engine.SendWR
	var wcs [2][]engine.WC
	for i := range pairs {
		p := benchPair(b, n)
		pairs[i], wcs[i] = p, make([]engine.WC, 1)
		wrs[i] = engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
		p.roundTrip(b, &wrs[i], wcs[i]) // warm up: buffers, timers
	}
	b.StopTimer()
	start := time.Now()
	must(b, pairs[0].roundTrips(&wrs[0], wcs[0], b.N))
	alone := time.Since(start)
	b.SetBytes(2 * n)
	b.ReportAllocs()
	b.StartTimer()
	var wg sync.WaitGroup
	var errs [2]error
	for i := range pairs {
		wg.Go(func() { errs[i] = pairs[i].roundTrips(&wrs[i], wcs[i], b.N) })
	}
	wg.Wait()
	b.StopTimer()
	must(b, errors.Join(errs[:]...))
	b.ReportMetric(2*alone.Seconds()/b.Elapsed().Seconds(), "x-1pair")
	b.ReportMetric(float64(n)*float64(b.N)/alone.Seconds()/1e6, "MB/s-1pair")
}

// BenchmarkRCRead is RDMA READ the same way.
func BenchmarkRCRead(b *testing.B) { benchRC(b, engine.WRRDMARead) }

// BenchmarkRCSend is a 4 KiB SEND into a posted receive.
func BenchmarkRCSend(b *testing.B) {
	b.Run("4KiB", func(b *testing.B) {
		const n = 4 << 10
		p := benchPair(b, 2*n)
		wr := engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n)}
		rwr := engine.RecvWR{ID: 2, SGL: sge(p.mrB, 0, n)}
		wc := make([]engine.WC, 1)
		b.SetBytes(n)
		b.ReportAllocs()
		for b.Loop() {
			if err := p.qb.PostRecv(rwr); err != nil {
				b.Fatal(err)
			}
			p.roundTrip(b, &wr, wc)
			if p.cqB.Poll(wc) != 1 {
				b.Fatal("no receive completion")
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
}

// BenchmarkBindInvalidate is a type 2 bind and a LOCAL_INV through the send queue.
func BenchmarkBindInvalidate(b *testing.B) {
	p := benchPair(b, 4096)
	mw, err := p.pdA.AllocMW(engine.MWType2)
	must(b, err)
	wc := make([]engine.WC, 1)
	b.ReportAllocs()
	for b.Loop() {
		rkey := mw.RKey()
		bind := engine.SendWR{ID: 1, Opcode: engine.WRBindMW, Flags: engine.SendSignaled, Bind: engine.BindInfo{MW: mw, RKey: rkey + 1, MR: p.mrA, Addr: p.mrA.Addr(), Length: 4096, Access: engine.AccessRemoteWrite}}
		p.roundTrip(b, &bind, wc)
		inv := engine.SendWR{ID: 2, Opcode: engine.WRLocalInv, Flags: engine.SendSignaled, Imm: mw.RKey()}
		p.roundTrip(b, &inv, wc)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

var _ = fmt.Sprint

// BenchmarkRCWriteStream is 8-byte RDMA WRITEs posted back to back, as a message-rate test
// (ib_write_bw -s 8) posts them: a batch of 64 at a time, the last one signaled, the simulator
// run until it completes. ops/s is WRITEs per second on one core, both ends and the wire
// included.
func BenchmarkRCWriteStream(b *testing.B) {
	const batch = 64
	p := benchPair(b, 8)
	wrs := make([]engine.SendWR, batch)
	for i := range wrs {
		wrs[i] = engine.SendWR{ID: uint64(i), Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
	}
	wrs[batch-1].Flags = engine.SendSignaled
	wc := make([]engine.WC, 1)
	// The completion callback says when to poll, rather than a poll between every two events
	// of the simulator, which would measure the poll more than the WRITEs.
	done := false
	p.cqA.OnCompletion(func() { done = true })
	b.SetBytes(8 * batch)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.qa.PostSend(wrs...); err != nil {
			b.Fatal(err)
		}
		for done = false; !done; {
			if !p.sim.Step() {
				b.Fatal("no completion")
			}
		}
		p.cqA.Poll(wc)
		if wc[0].Status != engine.WCSuccess {
			b.Fatal(fmtWC(wc[:1]))
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "ops/s")
}
