package ucontext

import (
	"encoding/binary"
	"net/netip"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
)

// The standard attribute bits (IBV_QP_STATE to IBV_QP_DEST_QPN); rate limit is EX_MODIFY_QP's.
const qpAttrMaskAll = 1<<21 - 1

// The offsets in struct ib_uverbs_modify_qp, from its start (the command's core).
const (
	mqDest        = 0
	mqHandle      = 64
	mqMask        = 68
	mqQKey        = 72
	mqRQPSN       = 76
	mqSQPSN       = 80
	mqDestQPN     = 84
	mqAccess      = 88
	mqPKeyIndex   = 92
	mqState       = 96
	mqCurState    = 97
	mqPathMTU     = 98
	mqEnSQD       = 100
	mqMaxRdAtomic = 101
	mqMaxDestRd   = 102
	mqMinRNR      = 103
	mqPort        = 104
	mqTimeout     = 105
	mqRetry       = 106
	mqRNRRetry    = 107
)

// flowLabelMask keeps a flow label's 20 bits: the kernel takes a wider one (UCX passes
// 0xffffffff) and the IPv6 header keeps these.
const flowLabelMask = 0xfffff

// dest is struct ib_uverbs_qp_dest: dgid (0), flow_label (16), sgid_index (24), hop_limit (25),
// traffic_class (26), port_num (31).
func dest(b []byte) engine.AHAttr {
	return engine.AHAttr{DGID: addrOf(b[0:16]), FlowLabel: binary.LittleEndian.Uint32(b[16:]) & flowLabelMask, HopLimit: b[25], TrafficClass: b[26]}
}

func addrOf(b []byte) netip.Addr { return netip.AddrFrom16([16]byte(b)).Unmap() }

func (c *Context) modifyQP(r *request) error {
	b := r.Core
	q, err := find(c.qps, r.u32(mqHandle), "QP")
	if err != nil {
		return err
	}
	mask := r.u32(mqMask)
	if mask&^qpAttrMaskAll != 0 {
		return errf(syscall.EOPNOTSUPP, "QP attribute mask 0x%x", mask)
	}
	m := engine.AttrMask(mask)
	le := binary.LittleEndian
	attr := engine.QPAttr{State: engine.QPState(b[mqState]), CurState: engine.QPState(b[mqCurState]),
		PathMTU: engine.MTU(b[mqPathMTU]), Timeout: b[mqTimeout], RetryCnt: b[mqRetry], RNRRetry: b[mqRNRRetry],
		MinRNRTimer: b[mqMinRNR], MaxRdAtomic: b[mqMaxRdAtomic], MaxDestRdAtomic: b[mqMaxDestRd], Port: b[mqPort],
		EnSQDAsyncNotify: b[mqEnSQD] != 0, PKeyIndex: le.Uint16(b[mqPKeyIndex:]),
		AccessFlags: engine.Access(le.Uint32(b[mqAccess:])), DestQPN: le.Uint32(b[mqDestQPN:]),
		RQPSN: le.Uint32(b[mqRQPSN:]), SQPSN: le.Uint32(b[mqSQPSN:]), QKey: le.Uint32(b[mqQKey:]), AH: dest(b[mqDest:])}
	switch {
	case m&engine.AttrState != 0 && attr.State > engine.QPSErr:
		return errf(syscall.EINVAL, "QP state %d", attr.State)
	case m&engine.AttrPort != 0 && attr.Port != 1:
		return errf(syscall.EINVAL, "port %d (the device has port 1)", attr.Port)
	case m&engine.AttrPKeyIndex != 0 && attr.PKeyIndex != 0:
		return errf(syscall.EINVAL, "P_Key index %d (the table has one entry)", attr.PKeyIndex)
	case m&engine.AttrAV != 0 && b[mqDest+30] == 0:
		return errf(syscall.EINVAL, "an address without a GRH: RoCE needs one")
	case m&engine.AttrAV != 0 && int(b[mqDest+24]) >= len(c.dev.GIDs):
		return errf(syscall.EINVAL, "GID index %d of %d", b[mqDest+24], len(c.dev.GIDs))
	}
	if err := q.emu.Modify(attr, m); err != nil {
		return err
	}
	if m&engine.AttrState != 0 && attr.State == engine.QPSReset {
		q.resetRings()
	}
	return nil
}

// resetRings starts the queues over empty when the QP goes back to RESET, as rxe's kernel does.
func (q *qp) resetRings() {
	q.posting.Lock()
	defer q.posting.Unlock()
	q.sqMu.Lock()
	defer q.sqMu.Unlock()
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.gone {
		return
	}
	q.sqNext, q.sqCons, q.rqCons = 0, 0, 0
	q.sq.setProducer(0)
	q.sq.setConsumer(0)
	if q.rq != nil {
		q.rq.setProducer(0)
		q.rq.setConsumer(0)
	}
}

// QUERY_QP: qp_handle (8), attr_mask (12). The answer is struct ib_uverbs_query_qp_resp.
func (c *Context) queryQP(r *request) error {
	q, err := find(c.qps, r.u32(8), "QP")
	if err != nil {
		return err
	}
	a := q.emu.Query()
	b := r.resp
	le := binary.LittleEndian
	if a.AH.DGID.IsValid() {
		g := a.AH.DGID.As16()
		copy(b[0:16], g[:])
		b[30] = 1 // is_global
	}
	le.PutUint32(b[16:], a.AH.FlowLabel)
	b[25], b[26], b[31] = a.AH.HopLimit, a.AH.TrafficClass, 1
	le.PutUint32(b[64:], q.sq.mask)
	if q.rq != nil {
		le.PutUint32(b[68:], q.rq.mask)
	}
	le.PutUint32(b[72:], uint32(q.maxSendSGE))
	le.PutUint32(b[76:], uint32(q.maxRecvSGE))
	le.PutUint32(b[80:], uint32(q.maxInline))
	le.PutUint32(b[84:], a.QKey)
	le.PutUint32(b[88:], a.RQPSN)
	le.PutUint32(b[92:], a.SQPSN)
	le.PutUint32(b[96:], a.DestQPN)
	le.PutUint32(b[100:], uint32(a.AccessFlags))
	le.PutUint16(b[104:], a.PKeyIndex)
	b[108], b[109], b[110] = byte(a.State), byte(a.State), byte(a.PathMTU)
	b[113], b[114], b[115] = a.MaxRdAtomic, a.MaxDestRdAtomic, a.MinRNRTimer
	b[116], b[117], b[118], b[119] = 1, a.Timeout, a.RetryCnt, a.RNRRetry
	if q.sigAll {
		b[122] = 1
	}
	return nil
}
