package engine_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"

	"github.com/softirdma/softirdma/emu/engine"
)

// soakUnreliable is the UD and UC traffic a soak seed runs beside its RC connection, on the same
// lossy link: A sends datagrams to a UD QP on B and messages to a UC QP on B. Loss, duplication,
// reordering and corruption may take any of them, so what is checked is what the transports
// promise whatever the link does: every signalled request completes SUCCESS in order at the
// sender, and every receive B completes holds exactly one message A sent, whole and unmixed
// (a datagram with its GRH area naming A). Neither transport promises order or one copy: a
// duplicated datagram, or a duplicated FIRST or ONLY of UC, which starts a message over at its
// own PSN, is delivered again.
type soakUnreliable struct {
	ud, uc           soakUnreliableQP
	sendCQ, udCQ     *engine.CQ
	ucCQ             *engine.CQ
	mrA, mrB         *engine.MR
	bufA, bufB       []byte
	srcIP            [4]byte
	sent             map[uint64][]byte // message id -> bytes
	delivered        [2]int            // receives completed on the UD and the UC QP
	udSigned, ucSign []uint64          // signalled ids, in posting order
}

type soakUnreliableQP struct {
	a, b *engine.QP
	msgs []engine.SendWR
}

// Where the unreliable traffic lives in the soak buffers' area of its own: sources on A,
// receive slots on B.
const (
	soakDgramSrcOff  = soakDgramOff
	soakDgramRecvOff = soakDgramOff
	soakDgramSlot    = 8 << 10
	soakDgramRecvs   = 32 // receive slots per QP
)

func newSoakUnreliable(p *pair, rnd *mrand.Rand) *soakUnreliable {
	t := p.t
	u := &soakUnreliable{bufA: p.bufA, bufB: p.bufB, mrA: p.mrA, mrB: p.mrB, srcIP: p.a.IP().As4(), sent: map[uint64][]byte{}}
	var err error
	u.sendCQ, err = p.a.CreateCQ(512)
	must(t, err)
	u.udCQ, err = p.b.CreateCQ(512)
	must(t, err)
	u.ucCQ, err = p.b.CreateCQ(512)
	must(t, err)
	caps := engine.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}
	mk := func(pd *engine.PD, typ engine.QPType, cq *engine.CQ) *engine.QP {
		q, err := pd.CreateQP(engine.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: caps})
		must(t, err)
		return q
	}
	u.ud.a, u.ud.b = mk(p.pdA, engine.QPTypeUD, u.sendCQ), mk(p.pdB, engine.QPTypeUD, u.udCQ)
	for _, q := range []*engine.QP{u.ud.a, u.ud.b} {
		must(t, q.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, QKey: 0x5eed}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrQKey))
		must(t, q.Modify(engine.QPAttr{State: engine.QPSRTR}, engine.AttrState))
		must(t, q.Modify(engine.QPAttr{State: engine.QPSRTS, SQPSN: rnd.Uint32() & engine.PSNMask}, engine.AttrState|engine.AttrSQPSN))
	}
	u.uc.a, u.uc.b = mk(p.pdA, engine.QPTypeUC, u.sendCQ), mk(p.pdB, engine.QPTypeUC, u.ucCQ)
	mtus := []engine.MTU{engine.MTU256, engine.MTU1024, engine.MTU4096}
	must(t, engine.ConnectUC(u.uc.a, u.uc.b, mtus[rnd.IntN(len(mtus))]))
	ah, err := p.pdA.CreateAH(engine.AHAttr{DGID: p.b.IP(), HopLimit: 64})
	must(t, err)
	for i := range soakDgramRecvs {
		for k, q := range []*engine.QP{u.ud.b, u.uc.b} {
			off := uint64(soakDgramRecvOff + (k*soakDgramRecvs+i)*soakDgramSlot)
			must(t, q.PostRecv(engine.RecvWR{ID: uint64(i), SGL: sge(u.mrB, off, soakDgramSlot)}))
		}
	}
	// Each message starts with its id, so a receive says which message it holds.
	src := uint64(soakDgramSrcOff)
	for id := uint64(1); id <= uint64(10+rnd.IntN(20)); id++ {
		ud := rnd.IntN(2) == 0
		n := 8 + rnd.IntN(4096-8)
		if ud && rnd.IntN(16) == 0 {
			n = 4097 // longer than the path MTU: not sent, completed SUCCESS
		}
		if !ud {
			n = 8 + rnd.IntN(soakDgramSlot-8)
		}
		b := u.bufA[src : src+uint64(n)]
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		binary.LittleEndian.PutUint64(b, id)
		u.sent[id] = bytes.Clone(b)
		wr := engine.SendWR{ID: id, Opcode: engine.WRSend, SGL: sge(u.mrA, src, uint32(n))}
		if rnd.IntN(2) == 0 {
			wr.Opcode, wr.Imm = engine.WRSendWithImm, uint32(id)
		}
		if rnd.IntN(3) > 0 {
			wr.Flags = engine.SendSignaled
		}
		if ud {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, u.ud.b.Num(), 0x5eed
			u.ud.msgs = append(u.ud.msgs, wr)
			if wr.Flags != 0 {
				u.udSigned = append(u.udSigned, id)
			}
		} else {
			u.uc.msgs = append(u.uc.msgs, wr)
			if wr.Flags != 0 {
				u.ucSign = append(u.ucSign, id)
			}
		}
		src += uint64(n+63) &^ 63
	}
	must(t, u.ud.a.PostSend(u.ud.msgs...))
	must(t, u.uc.a.PostSend(u.uc.msgs...))
	return u
}

// check says what broke a promise, or "".
func (u *soakUnreliable) check() string {
	// Sends: UD's and UC's signalled requests, each QP's in order, all SUCCESS.
	var ud, uc []uint64
	for _, wc := range poll(u.sendCQ) {
		if wc.Status != engine.WCSuccess || wc.Opcode != engine.WCSend {
			return fmt.Sprintf("send completion %s", fmtWC([]engine.WC{wc}))
		}
		if wc.QPNum == u.ud.a.Num() {
			ud = append(ud, wc.WRID)
		} else {
			uc = append(uc, wc.WRID)
		}
	}
	if fmt.Sprint(ud) != fmt.Sprint(u.udSigned) || fmt.Sprint(uc) != fmt.Sprint(u.ucSign) {
		return fmt.Sprintf("send completions UD %v UC %v, want %v and %v", ud, uc, u.udSigned, u.ucSign)
	}
	for k, cq := range []*engine.CQ{u.udCQ, u.ucCQ} {
		for _, wc := range poll(cq) {
			if wc.Status != engine.WCSuccess {
				return fmt.Sprintf("receive completion %s", fmtWC([]engine.WC{wc}))
			}
			slot := u.bufB[soakDgramRecvOff+(k*soakDgramRecvs+int(wc.WRID))*soakDgramSlot:]
			n := int(wc.ByteLen)
			if k == 0 {
				if wc.Flags&engine.WCWithGRH == 0 || n < engine.GRHLen || !bytes.Equal(slot[20+12:20+16], u.srcIP[:]) {
					return fmt.Sprintf("datagram receive %d: flags %d, %d bytes, GRH source % x", wc.WRID, wc.Flags, n, slot[32:36])
				}
				slot, n = slot[engine.GRHLen:], n-engine.GRHLen
			}
			if n < 8 {
				return fmt.Sprintf("receive %d of %d bytes", wc.WRID, n)
			}
			id := binary.LittleEndian.Uint64(slot)
			want, ok := u.sent[id]
			if !ok || !bytes.Equal(slot[:n], want) {
				return fmt.Sprintf("receive %d (%s) holds %d bytes of message %d, not that message whole", wc.WRID, []string{"UD", "UC"}[k], n, id)
			}
			if wc.Flags&engine.WCWithImm != 0 && wc.Imm != uint32(id) {
				return fmt.Sprintf("message %d with immediate 0x%x", id, wc.Imm)
			}
			u.delivered[k]++
		}
	}
	return ""
}
