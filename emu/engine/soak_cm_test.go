package engine_test

import (
	"fmt"
	mrand "math/rand/v2"
	"slices"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
)

// soakConnOffset is where the kth connection's message lives in the soak buffers.
func soakConnOffset(k int) uint64 { return soakConnOff + uint64(k)*256 }

// soakConnections sets up one to four connections through the connection manager (IB CM over
// the GSI QPs) on the seed's lossy link, once the seed's traffic is done, sends a message over
// each, and tears them down: every connection is established on both sides, each message
// arrives whole on the QP its connection accepted, and both sides leave every time wait,
// whatever the link lost, duplicated, reordered or corrupted of the CM messages. It says what
// went wrong, or "".
func soakConnections(p *pair, rnd *mrand.Rand, seed uint64) string {
	n := 1 + rnd.IntN(4)
	count := map[string]int{}
	newQP := func(pd *engine.PD, dev *engine.Device) (*engine.QP, *engine.CQ, error) {
		cq, err := dev.CreateCQ(8)
		if err != nil {
			return nil, nil, err
		}
		qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: engine.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return qp, cq, err
	}
	var qpA, qpB []*engine.QP
	var cqB []*engine.CQ
	var ids []*rdmacm.ID
	for range n {
		qa, _, err := newQP(p.pdA, p.a)
		if err != nil {
			return err.Error()
		}
		qb, cq, err := newQP(p.pdB, p.b)
		if err != nil {
			return err.Error()
		}
		qpA, qpB, cqB = append(qpA, qa), append(qpB, qb), append(cqB, cq)
	}
	var failure error
	cfg := func(side string, r uint64) rdmacm.Config {
		return rdmacm.Config{Rand: mrand.NewPCG(seed, r), ResponseTimeout: 12, Events: func(e rdmacm.Event) {
			count[side+" "+e.Type.String()]++
			if e.Type != rdmacm.ConnectRequest {
				return
			}
			// B's kth request gets its kth QP, its receive posted before the connection.
			k := count["B CONNECT_REQUEST"] - 1
			qp := qpB[k]
			if err := qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags); err != nil {
				failure = err
			} else if err := qp.PostRecv(engine.RecvWR{ID: 1, SGL: sge(p.mrB, soakConnOffset(n+k), 64)}); err != nil {
				failure = err
			} else if err := e.ID.Accept(qp, rdmacm.ConnParam{}); err != nil {
				failure = err
			}
		}}
	}
	mA, err := rdmacm.New(p.a, cfg("A", 1))
	if err != nil {
		return err.Error()
	}
	mB, err := rdmacm.New(p.b, cfg("B", 2))
	if err != nil {
		return err.Error()
	}
	if _, err := mB.Listen(7174); err != nil {
		return err.Error()
	}
	for i := range n {
		id, err := mA.Connect(qpA[i], p.b.IP(), 7174, rdmacm.ConnParam{})
		if err != nil {
			return err.Error()
		}
		ids = append(ids, id)
	}
	if p.sim.RunUntilIdle(50_000_000) == 50_000_000 {
		return "still busy connecting"
	}
	if failure != nil {
		return failure.Error()
	}
	msg := func(i int) string { return fmt.Sprintf("connection %d of seed %d", i, seed) }
	for i, id := range ids {
		if id.State() != "ESTABLISHED" || count["B CONNECT_REQUEST"] != n {
			return fmt.Sprintf("connection %d of %d: %s; events %v", i, n, id.State(), count)
		}
		copy(p.bufA[soakConnOffset(i):], msg(i))
		if err := qpA[i].PostSend(engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, soakConnOffset(i), uint32(len(msg(i))))}); err != nil {
			return err.Error()
		}
	}
	p.sim.RunUntilIdle(50_000_000)
	// Each of B's QPs got one message, whole, and together they are A's n.
	var got []string
	for k := range n {
		var wc [2]engine.WC
		c := cqB[k].Poll(wc[:])
		if c != 1 || wc[0].Status != engine.WCSuccess {
			return fmt.Sprintf("B's QP %d: %d completions %+v", k, c, wc[:c])
		}
		off := soakConnOffset(n + k)
		got = append(got, string(p.bufB[off:off+uint64(wc[0].ByteLen)]))
	}
	slices.Sort(got)
	for i := range n {
		if got[i] != msg(i) {
			return fmt.Sprintf("messages received %q", got)
		}
	}
	for _, id := range ids {
		if err := id.Disconnect(); err != nil {
			return err.Error()
		}
	}
	if p.sim.RunUntilIdle(50_000_000) == 50_000_000 {
		return "still busy disconnecting"
	}
	for _, k := range []string{"A ESTABLISHED", "B CONNECT_REQUEST", "B ESTABLISHED", "A DISCONNECTED", "B DISCONNECTED", "A TIMEWAIT_EXIT", "B TIMEWAIT_EXIT"} {
		if count[k] != n {
			return fmt.Sprintf("%d connections, events %v", n, count)
		}
	}
	return ""
}
