package rdmacm

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
)

// maxAHs is how many peers' address handles QP1 keeps; past it a handle is made for the
// message that needs it and not kept, so that sources a peer makes up hold nothing.
const maxAHs = 4096

// The GSI QP's buffers: receive slots of the GRH area and a MAD (512, as Linux's MAD layer
// posts), and send slots of a MAD, each in use until its send completes.
const (
	recvSlots = 512
	recvSlot  = engine.GRHLen + mad.Len
	sendSlots = 1024
)

func (m *Manager) postRecv(i int) error {
	return m.qp1.PostRecv(engine.RecvWR{ID: uint64(i), SGL: []engine.SGE{{Addr: m.mr.Addr() + uint64(i*recvSlot), Length: recvSlot, LKey: m.mr.LKey()}}})
}

// ah is the address handle of QP1 on dst, made once.
func (m *Manager) ah(dst netip.Addr) (*engine.AH, error) {
	m.mu.Lock()
	ah := m.ahs[dst]
	m.mu.Unlock()
	if ah != nil {
		return ah, nil
	}
	ah, err := m.pd.CreateAH(engine.AHAttr{DGID: dst, HopLimit: 64})
	if err != nil {
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	m.mu.Lock()
	if len(m.ahs) < maxAHs {
		m.ahs[dst] = ah
	}
	m.mu.Unlock()
	return ah, nil
}

// encode is a CM message's DataLen bytes as put writes them (into a buffer of that size, which
// no Put refuses).
func encode(put func([]byte) error) []byte {
	msg := make([]byte, cm.DataLen)
	_ = put(msg)
	return msg
}

// sendMAD sends one CM MAD on QP1. m.mu is held.
func (m *Manager) sendMAD(ah *engine.AH, tid uint64, attr uint16, msg []byte) {
	if m.inflight == sendSlots {
		m.stats.Dropped++ // every slot is on its way: this one is lost, its timer sends it again
		return
	}
	slot := m.sendNext
	off := recvSlots*recvSlot + slot*mad.Len
	b := m.buf[off : off+mad.Len]
	clear(b[:mad.HeaderLen])
	b[0], b[1], b[2], b[3] = 1, byte(mad.ClassCM), 2, byte(mad.MethodSend)
	binary.BigEndian.PutUint64(b[8:], tid)
	binary.BigEndian.PutUint16(b[16:], attr)
	copy(b[mad.HeaderLen:], msg)
	// Slots are used in order and free in order: a GSI QP's sends complete in posting order.
	if err := m.qp1.PostSend(engine.SendWR{Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: m.mr.Addr() + uint64(off), Length: mad.Len, LKey: m.mr.LKey()}},
		AH: ah, RemoteQPN: 1, RemoteQKey: engine.GSIQKey}); err != nil {
		m.stats.Dropped++
		return
	}
	m.sendNext = (m.sendNext + 1) % sendSlots
	m.inflight++
	m.stats.Sent++
}

// poll takes the GSI QP's completions: each received MAD is handled and its receive posted again.
func (m *Manager) poll() {
	m.polling.Store(false)
	var wcs [16]engine.WC
	for {
		n := m.cq.Poll(wcs[:])
		if n == 0 {
			break
		}
		for _, wc := range wcs[:n] {
			if wc.Opcode != engine.WCRecv {
				m.mu.Lock()
				m.inflight--
				m.mu.Unlock()
				continue
			}
			if wc.Status == engine.WCSuccess && wc.ByteLen >= recvSlot {
				slot := m.buf[int(wc.WRID)*recvSlot : (int(wc.WRID)+1)*recvSlot]
				m.receive(slot, wc)
			}
			if wc.Status != engine.WCWRFlushErr {
				_ = m.postRecv(int(wc.WRID))
			}
		}
	}
	m.deliver()
}

// receive handles one MAD that arrived with its GRH area.
func (m *Manager) receive(slot []byte, wc engine.WC) {
	src, _ := engine.SourceAddr(slot, wc.NetworkHdrType)
	b := slot[engine.GRHLen:]
	h, err := mad.Parse(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Received++
	if err != nil || h.MgmtClass != mad.ClassCM || h.Method != mad.MethodSend {
		m.stats.Dropped++
		return
	}
	msg := b[mad.HeaderLen : mad.HeaderLen+cm.DataLen]
	switch h.AttrID {
	case cm.AttrREQ:
		m.onREQ(src, h.TID, msg)
	case cm.AttrREP:
		m.onREP(msg)
	case cm.AttrRTU:
		m.onRTU(msg)
	case cm.AttrREJ:
		m.onREJ(src, msg)
	case cm.AttrDREQ:
		m.onDREQ(src, h.TID, msg)
	case cm.AttrDREP:
		m.onDREP(msg)
	case cm.AttrMRA:
		m.onMRA(msg)
	case cm.AttrSIDRREQ:
		m.onSIDRREQ(src, h.TID, msg)
	case cm.AttrSIDRREP:
		m.onSIDRREP(msg)
	default:
		m.stats.Dropped++
	}
}

// ahLocked is ah with m.mu held: it releases the lock while the handle is made.
func (m *Manager) ahLocked(dst netip.Addr) (*engine.AH, error) {
	if ah := m.ahs[dst]; ah != nil {
		return ah, nil
	}
	m.mu.Unlock()
	ah, err := m.ah(dst)
	m.mu.Lock()
	return ah, err
}
