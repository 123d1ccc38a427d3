package emu_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/wire"
)

// Two devices on a simulated wire that loses frames: A writes into B's memory with a signalled
// RDMA WRITE and polls its completion. The README's example is this one.
func Example() {
	sim := emu.NewSim()
	fab := emu.NewFabric(sim, 7) // same seed, same run, same pcap
	var pcap bytes.Buffer
	check(fab.CapturePcap(&pcap))
	a, b := fab.AddDevice("A", emu.LinkConfig{Loss: 0.5}), fab.AddDevice("B", emu.LinkConfig{})

	pdA, pdB := must(a.AllocPD()), must(b.AllocPD())
	src, dst := []byte("hello, remote memory"), make([]byte, 20)
	mrA := must(pdA.RegMR(src, emu.AccessLocalWrite))
	mrB := must(pdB.RegMR(dst, emu.AccessLocalWrite|emu.AccessRemoteWrite))
	cqA, cqB := must(a.CreateCQ(16)), must(b.CreateCQ(16))
	caps := emu.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa := must(pdA.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cqA, RecvCQ: cqA, Cap: caps}))
	qb := must(pdB.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cqB, RecvCQ: cqB, Cap: caps}))
	check(emu.ConnectRC(qa, qb, emu.ConnectOptions{})) // RESET -> INIT -> RTR -> RTS on both

	sgl := []emu.SGE{{Addr: mrA.Addr(), Length: uint32(len(src)), LKey: mrA.LKey()}}
	check(qa.PostSend(emu.SendWR{ID: 1, Opcode: emu.WRRDMAWrite, Flags: emu.SendSignaled,
		SGL: sgl, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}))
	sim.RunUntilIdle(0) // ACK timeouts cost no wall-clock time

	wc := make([]emu.WC, 4)
	n := cqA.Poll(wc)
	fmt.Println(n, wc[0].WRID, wc[0].Opcode, wc[0].Status, wc[0].Err)
	fmt.Printf("%q after %d retransmission(s)\n", dst, a.Stats().Retransmits)
	printFrames(pcap.Bytes()) // each lost WRITE goes again after the ACK timeout (67 ms)
	// Output:
	// 1 1 RDMA_WRITE SUCCESS <nil>
	// "hello, remote memory" after 2 retransmission(s)
	// 0s 192.0.2.1 RC_RDMA_WRITE_ONLY psn 0
	// 67.108864ms 192.0.2.1 RC_RDMA_WRITE_ONLY psn 0
	// 134.217728ms 192.0.2.1 RC_RDMA_WRITE_ONLY psn 0
	// 134.218728ms 192.0.2.2 RC_ACKNOWLEDGE psn 0
}

// A WRITE beyond the remote MR: B refuses it with NAK 0x62, both QPs go to the error state,
// and the completion and the events say which check failed.
func Example_accessError() {
	sim := emu.NewSim()
	fab := emu.NewFabric(sim, 1)
	fab.OnEvent(func(e emu.Event) {
		if e.Kind == emu.EvAccess {
			fmt.Println(e)
		}
	})
	a, b := fab.AddDevice("A", emu.LinkConfig{}), fab.AddDevice("B", emu.LinkConfig{})
	pdA, pdB := must(a.AllocPD()), must(b.AllocPD())
	mrA := must(pdA.RegMR(make([]byte, 64), emu.AccessLocalWrite))
	mrB := must(pdB.RegMR(make([]byte, 64), emu.AccessLocalWrite|emu.AccessRemoteWrite))
	cqA, cqB := must(a.CreateCQ(16)), must(b.CreateCQ(16))
	caps := emu.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa := must(pdA.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cqA, RecvCQ: cqA, Cap: caps}))
	qb := must(pdB.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cqB, RecvCQ: cqB, Cap: caps}))
	check(emu.ConnectRC(qa, qb, emu.ConnectOptions{}))

	check(qa.PostSend(emu.SendWR{ID: 9, Opcode: emu.WRRDMAWrite, Flags: emu.SendSignaled,
		SGL:        []emu.SGE{{Addr: mrA.Addr(), Length: 64, LKey: mrA.LKey()}},
		RemoteAddr: mrB.Addr() + 32, RKey: mrB.RKey()}))
	sim.RunUntilIdle(0)

	wc := make([]emu.WC, 4)
	n := cqA.Poll(wc)
	fmt.Println(n, wc[0].WRID, wc[0].Status, qa.State(), qb.State())
	// Output:
	// t=1µs          B      qp=0x000011 access   request psn 0 refused: remote access with key 0x000001eb failed check range: [0x7f0000000020, +64) is outside [0x7f0000000000, 0x7f0000000040) -> REM_ACCESS_ERR, NAK 0x62 remote access error
	// t=2µs          A      qp=0x000011 access   RDMA_WRITE failed: the responder answered psn 0 with NAK_REM_ACCESS
	// 1 9 REM_ACCESS_ERR ERR ERR
}

// A memory window (type 2) over part of B's memory: B binds it with a key8 of its choosing
// through its send queue, A writes through the window's rkey, B invalidates the window and
// binds it again with a new key8, and A's WRITE through the old rkey is refused.
func Example_memoryWindow() {
	sim := emu.NewSim()
	fab := emu.NewFabric(sim, 1)
	fab.OnEvent(func(e emu.Event) {
		if e.Kind == emu.EvAccess && e.Device == "B" { // B's refusal, with the key's history
			fmt.Println(e)
		}
	})
	a, b := fab.AddDevice("A", emu.LinkConfig{}), fab.AddDevice("B", emu.LinkConfig{})
	pdA, pdB := must(a.AllocPD()), must(b.AllocPD())
	src, dst := []byte("through the window"), make([]byte, 64)
	mrA := must(pdA.RegMR(src, emu.AccessLocalWrite))
	mrB := must(pdB.RegMR(dst, emu.AccessLocalWrite|emu.AccessMWBind)) // no remote rights of its own
	cqA, cqB := must(a.CreateCQ(16)), must(b.CreateCQ(16))
	caps := emu.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa := must(pdA.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cqA, RecvCQ: cqA, Cap: caps}))
	qb := must(pdB.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cqB, RecvCQ: cqB, Cap: caps}))
	check(emu.ConnectRC(qa, qb, emu.ConnectOptions{}))
	mw := must(pdB.AllocMW(emu.MWType2))
	wc := make([]emu.WC, 4)

	// bind gives the window bytes [16, 48) of B's MR, remote write only, under key8.
	bind := func(id uint64, key8 uint32) {
		check(qb.PostSend(emu.SendWR{ID: id, Opcode: emu.WRBindMW, Flags: emu.SendSignaled,
			Bind: emu.BindInfo{MW: mw, RKey: mw.RKey()&^0xff | key8, MR: mrB, Addr: mrB.Addr() + 16, Length: 32,
				Access: emu.AccessRemoteWrite}}))
		sim.RunUntilIdle(0)
		n := cqB.Poll(wc)
		fmt.Printf("B: %d %s %s, rkey 0x%08x\n", n, wc[0].Opcode, wc[0].Status, mw.RKey())
	}
	write := func(id uint64, rkey uint32) {
		check(qa.PostSend(emu.SendWR{ID: id, Opcode: emu.WRRDMAWrite, Flags: emu.SendSignaled,
			SGL:        []emu.SGE{{Addr: mrA.Addr(), Length: uint32(len(src)), LKey: mrA.LKey()}},
			RemoteAddr: mrB.Addr() + 16, RKey: rkey}))
		sim.RunUntilIdle(0)
		n := cqA.Poll(wc)
		fmt.Printf("A: %d wr %d %s %s\n", n, wc[0].WRID, wc[0].Opcode, wc[0].Status)
	}

	bind(1, 0x2a)
	first := mw.RKey()
	write(10, first)
	fmt.Printf("B's memory: %q\n", dst[16:16+len(src)])

	// A type 2 window is invalidated before it is bound again (o10-37.2.30).
	check(qb.PostSend(emu.SendWR{ID: 2, Opcode: emu.WRLocalInv, Imm: first}))
	bind(3, 0x2b)
	write(11, first) // the old rkey
	// Output:
	// B: 1 BIND_MW SUCCESS, rkey 0x8000002a
	// A: 1 wr 10 RDMA_WRITE SUCCESS
	// B's memory: "through the window"
	// B: 1 BIND_MW SUCCESS, rkey 0x8000002b
	// t=3µs          B      qp=0x000011 access   request psn 1 refused: remote access with key 0x8000002a failed check key: current key is 0x8000002b (key 0x8000002a was revoked by LOCAL_INV on QP 0x000011 at t=2µs) -> REM_ACCESS_ERR, NAK 0x62 remote access error
	// A: 1 wr 11 RDMA_WRITE REM_ACCESS_ERR
}

// SEND and RECV: B posts a receive, A sends into it, and each side polls its completion.
func Example_sendRecv() {
	sim := emu.NewSim()
	fab := emu.NewFabric(sim, 1)
	a, b := fab.AddDevice("A", emu.LinkConfig{}), fab.AddDevice("B", emu.LinkConfig{})
	pdA, pdB := must(a.AllocPD()), must(b.AllocPD())
	msg, inbox := []byte("a message for B"), make([]byte, 64)
	mrA := must(pdA.RegMR(msg, 0))
	mrB := must(pdB.RegMR(inbox, emu.AccessLocalWrite)) // a receive writes locally
	cqA, cqB := must(a.CreateCQ(16)), must(b.CreateCQ(16))
	caps := emu.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa := must(pdA.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cqA, RecvCQ: cqA, Cap: caps}))
	qb := must(pdB.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cqB, RecvCQ: cqB, Cap: caps}))
	check(emu.ConnectRC(qa, qb, emu.ConnectOptions{}))

	check(qb.PostRecv(emu.RecvWR{ID: 7, SGL: []emu.SGE{{Addr: mrB.Addr(), Length: uint32(len(inbox)), LKey: mrB.LKey()}}}))
	check(qa.PostSend(emu.SendWR{ID: 8, Opcode: emu.WRSend, Flags: emu.SendSignaled,
		SGL: []emu.SGE{{Addr: mrA.Addr(), Length: uint32(len(msg)), LKey: mrA.LKey()}}}))
	sim.RunUntilIdle(0)

	wc := make([]emu.WC, 4)
	for _, side := range []struct {
		name string
		cq   *emu.CQ
	}{{"A", cqA}, {"B", cqB}} {
		n := side.cq.Poll(wc)
		w := wc[0]
		fmt.Printf("%s: %d wr %d %s %s len %d qp 0x%x src qp 0x%x\n", side.name, n, w.WRID, w.Opcode, w.Status, w.ByteLen, w.QPNum, w.SrcQP)
	}
	fmt.Printf("B received %q\n", inbox[:wc[0].ByteLen])
	// Output:
	// A: 1 wr 8 SEND SUCCESS len 15 qp 0x11 src qp 0x0
	// B: 1 wr 7 RECV SUCCESS len 15 qp 0x11 src qp 0x11
	// B received "a message for B"
}

// TestREADMEExample keeps the README's Go example compiling and true: its lines must be lines of
// Example, in the same order, where Example may have more (a README line "// ..." marks a cut).
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(self), "\nfunc Example() {\n")
	body, _, _ = strings.Cut(body, "\n}\n")
	_, block, ok2 := strings.Cut(string(readme), "```go\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("no Example in example_test.go or no ```go block in README.md")
	}
	example := strings.Split(body, "\n")
	next, checked := 0, 0
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l == "..." || l == "// ..." {
			continue
		}
		for next < len(example) && strings.TrimSpace(example[next]) != l {
			next++
		}
		if next == len(example) {
			t.Fatalf("README.md's Go example has %q, which Example does not have here (or has earlier)", l)
		}
		next++
		checked++
	}
	if checked < 10 {
		t.Fatalf("README.md's Go example has %d lines; is it the right block?", checked)
	}
}

// printFrames prints each RoCEv2 frame of a pcap: when it entered the wire, who sent it, what.
func printFrames(pcap []byte) {
	r := must(wire.NewPcapReader(bytes.NewReader(pcap)))
	var p wire.Parser
	var f wire.Frame
	var start time.Time
	for {
		data, ci, err := r.Next()
		if err != nil {
			return
		}
		if start.IsZero() {
			start = ci.Timestamp
		}
		check(p.Parse(&f, data))
		fmt.Println(ci.Timestamp.Sub(start), f.SrcIP(), f.Opcode, "psn", f.BTH.PSN())
	}
}

// must and check stop an example at the first error: the calls they wrap fail only on a bug.
func must[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
