package engine_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
)

// TestMesh16 runs a full mesh of RC connections between 16 devices in one process: every device
// writes to and sends to every other one, over a lossy link, and everything must arrive.
func TestMesh16(t *testing.T) {
	const n = 16
	sm := sim.NewSim()
	fab := sim.NewFabric(sm, 16)
	type node struct {
		dev *engine.Device
		pd  *engine.PD
		cq  *engine.CQ
		buf []byte
		mr  *engine.MR
		qps [n]*engine.QP
	}
	nodes := make([]*node, n)
	for i := range nodes {
		d := fab.AddDevice(fmt.Sprintf("d%02d", i), sim.LinkConfig{Loss: 0.01})
		pd, err := d.AllocPD()
		must(t, err)
		cq, err := d.CreateCQ(4 * n)
		must(t, err)
		buf := make([]byte, n*4096)
		mr, err := pd.RegMR(buf, engine.AccessLocalWrite|engine.AccessRemoteWrite)
		must(t, err)
		nodes[i] = &node{dev: d, pd: pd, cq: cq, buf: buf, mr: mr}
	}
	caps := engine.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a, b := nodes[i], nodes[j]
			var err error
			a.qps[j], err = a.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: caps})
			must(t, err)
			b.qps[i], err = b.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: b.cq, RecvCQ: b.cq, Cap: caps})
			must(t, err)
			must(t, engine.ConnectRC(a.qps[j], b.qps[i], engine.ConnectOptions{Timeout: 8}))
		}
	}
	// Node i's bytes at offset 2048*... : slot j of node i's buffer holds what j wrote, and
	// node i sends from the first half of its own slot i.
	for i, a := range nodes {
		msg := bytes.Repeat([]byte{byte(i + 1)}, 1000)
		copy(a.buf[i*4096:], msg)
		for j, b := range nodes {
			if i == j {
				continue
			}
			must(t, a.qps[j].PostRecv(engine.RecvWR{ID: uint64(j), SGL: []engine.SGE{{Addr: a.mr.Addr() + uint64(j)*4096 + 2048, Length: 2048, LKey: a.mr.LKey()}}}))
			must(t, a.qps[j].PostSend(
				engine.SendWR{ID: uint64(j), Opcode: engine.WRRDMAWrite, SGL: []engine.SGE{{Addr: a.mr.Addr() + uint64(i)*4096, Length: 1000, LKey: a.mr.LKey()}},
					RemoteAddr: b.mr.Addr() + uint64(i)*4096, RKey: b.mr.RKey()},
				engine.SendWR{ID: uint64(100 + j), Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: a.mr.Addr() + uint64(i)*4096, Length: 1000, LKey: a.mr.LKey()}}}))
		}
	}
	if steps := sm.RunUntilIdle(10_000_000); steps == 10_000_000 {
		t.Fatal("mesh still busy")
	}
	for i, a := range nodes {
		var sends, recvs int
		for _, wc := range poll(a.cq) {
			if wc.Status != engine.WCSuccess {
				t.Fatalf("node %d: %s", i, fmtWC([]engine.WC{wc}))
			}
			if wc.Opcode == engine.WCRecv {
				recvs++
			} else {
				sends++
			}
		}
		if sends != n-1 || recvs != n-1 {
			t.Fatalf("node %d: %d send and %d receive completions, want %d each", i, sends, recvs, n-1)
		}
		for j := range nodes {
			if i == j {
				continue
			}
			want := bytes.Repeat([]byte{byte(j + 1)}, 1000)
			slot := a.buf[j*4096:]
			if !bytes.Equal(slot[:1000], want) || !bytes.Equal(slot[2048:3048], want) {
				t.Fatalf("node %d: what node %d wrote or sent is not there", i, j)
			}
		}
	}
}
