package engine

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"syscall"

	"github.com/softirdma/softirdma/wire/mad"
	"github.com/softirdma/softirdma/wire/roce"
)

// udTransport is Unreliable Datagram: each SEND is one packet to the QP a work request names,
// through an address handle, with a DETH carrying the Q_Key and the sender's QP; nothing is
// acknowledged, and a QP takes datagrams from anyone who knows its Q_Key.
var udTransport = transport{
	name:        "UD",
	wire:        roce.UD,
	transitions: udTransitions,
	sends:       wrs(WRSend, WRSendWithImm),
	single:      true,
	request:     (*QP).udRequest,
	header:      udHeader,
	postCheck:   udPostCheck,
	modified:    udModified,
}

// gsiTransport is the GSI QP, QP1: a UD QP whose datagrams are MADs, which takes any datagram
// carrying the GSI Q_Key whatever Q_Key it was given, and sends with source QP 1. Whoever owns
// the port's MADs creates it; the engine answers none itself.
var gsiTransport = func() transport {
	t := udTransport
	t.name = "GSI"
	t.transitions = gsiTransitions
	return t
}()

const (
	gsiQPN = 1
	// GSIQKey is the Q_Key of every datagram to or from a GSI QP (IBTA 13.5.3.1); wire/mad,
	// which owns the MADs those datagrams carry, defines it.
	GSIQKey = mad.GSIQKey
	// controlledQKey in a work request's Q_Key says to send with the QP's own Q_Key instead
	// (IBTA 10.2.5, the controlled Q_Key): a consumer cannot claim a privileged Q_Key.
	controlledQKey = 1 << 31
	// GRHLen is the area at the head of a datagram's receive buffer where the network header
	// goes, before the data: a GRH, or for IPv4 20 zero bytes and the IPv4 header.
	GRHLen = 40
	// McastQPN is the destination QP of a datagram to a multicast group.
	McastQPN = 0xFFFFFF
)

// udTransitions is the verbs state machine for UD QPs (ib_modify_qp_is_ok): a Q_Key and no
// path, PSNs or retry counts, since nothing is acknowledged.
var udTransitions = map[[2]QPState][2]AttrMask{
	{QPSReset, QPSInit}: {AttrPKeyIndex | AttrPort | AttrQKey, 0},
	{QPSInit, QPSInit}:  {0, AttrPKeyIndex | AttrPort | AttrQKey},
	{QPSInit, QPSRTR}:   {0, AttrPKeyIndex | AttrQKey},
	{QPSRTR, QPSRTS}:    {AttrSQPSN, AttrCurState | AttrQKey},
	{QPSRTS, QPSRTS}:    {0, AttrCurState | AttrQKey},
	{QPSRTS, QPSSQD}:    {0, AttrEnSQDAsyncNotify},
	{QPSSQD, QPSRTS}:    {0, AttrCurState | AttrQKey},
	{QPSSQD, QPSSQD}:    {0, AttrPKeyIndex | AttrQKey},
	{QPSSQE, QPSRTS}:    {0, AttrCurState | AttrQKey},
}

// gsiTransitions is UD's, without a port: the GSI QP is the port's own.
var gsiTransitions = func() map[[2]QPState][2]AttrMask {
	t := maps.Clone(udTransitions)
	t[[2]QPState{QPSReset, QPSInit}] = [2]AttrMask{AttrPKeyIndex | AttrQKey, 0}
	t[[2]QPState{QPSInit, QPSInit}] = [2]AttrMask{0, AttrPKeyIndex | AttrQKey}
	return t
}()

// udModified gives a datagram QP the port's MTU as its path MTU when it leaves RESET: each of
// its datagrams is one packet of at most that.
func udModified(qp *QP, cur, next QPState) {
	if cur == QPSReset && next == QPSInit {
		qp.attr.PathMTU = qp.dev.activeMTU()
	}
}

// udPostCheck: a datagram needs an address handle of the QP's device.
func udPostCheck(qp *QP, wr SendWR) error {
	switch {
	case wr.AH == nil:
		return fmt.Errorf("a %s work request needs an address handle: %w", qp.tr.name, syscall.EINVAL)
	case wr.AH.pd == nil:
		return fmt.Errorf("the address handle was not made by CreateAH: %w", syscall.EINVAL)
	case wr.AH.pd.dev != qp.dev:
		return fmt.Errorf("the address handle is another device's: %w", syscall.EINVAL)
	case wr.AH.isDestroyed():
		return fmt.Errorf("the address handle is destroyed: %w", syscall.EINVAL)
	}
	return nil
}

// udHeader addresses a datagram by its work request: the handle's path, the QP it names, and a
// DETH with the Q_Key (the QP's own when the request's has the controlled bit) and this QP.
func udHeader(qp *QP, w *sendWQE, h roce.Header) (roce.Header, route) {
	ah := w.wr.AH
	h.DestQP = w.wr.RemoteQPN & psnMask
	h.QKey = w.wr.RemoteQKey
	switch {
	case qp.typ == QPTypeGSI:
		// MADs carry the GSI Q_Key whatever the request says; rxe also sets AckReq on them,
		// which nothing reads, and so does softirdma, for the same bytes on the wire.
		h.QKey, h.AckReq = GSIQKey, true
	case h.QKey&controlledQKey != 0:
		h.QKey = qp.attr.QKey
	}
	h.SrcQP = qp.qpn
	if qp.ud.ah != ah {
		// The handle's path from this QP's UDP source port, as rxe's; kept while the QP sends
		// to the same handle, so a stream of datagrams builds its headers from one template.
		p := ah.path
		p.SrcPort = srcPort(qp.qpn)
		qp.ud.ah, qp.ud.builder = ah, roce.Builder{Path: p}
	}
	return h, route{b: &qp.ud.builder, local: ah.local}
}

// udRequest is the responder of a datagram QP: the Q_Key must match (a mismatch is dropped and
// counted, never completed or answered), a receive must be posted and hold the datagram with its
// GRH area (without one the datagram is dropped), and the receive gets the network header in its
// first 40 bytes and the data after it.
func (qp *QP) udRequest(f *roce.Frame) {
	d := qp.dev
	if !qp.takesRequests(f) {
		return
	}
	want := qp.attr.QKey
	if qp.typ == QPTypeGSI {
		want = GSIQKey
	}
	if got := f.DETH.QKey(); got != want {
		d.stats.RxDropped.Add(1)
		d.stats.RxBadQKey.Add(1)
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("datagram from QP 0x%06x with Q_Key 0x%08x, the QP's is 0x%08x", f.DETH.SrcQP(), got, want)})
		return
	}
	noRecv := func() {
		d.stats.RxDropped.Add(1)
		d.stats.RxNoRecv.Add(1)
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("datagram from QP 0x%06x and no receive posted", f.DETH.SrcQP())})
	}
	length, ok := qp.recvReady()
	if !ok {
		noRecv()
		return
	}
	n := uint64(GRHLen + len(f.Payload))
	if n > length && qp.srq == nil {
		// As rxe: a datagram too long for the receive is dropped, and the receive stays for
		// the next one. From an SRQ the receive is taken and completes in error (below).
		d.stats.RxDropped.Add(1)
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("datagram of %d bytes with its GRH area, the receive holds %d", n, length)})
		return
	}
	if pf := qp.recvFault(min(n, length)); pf != nil {
		// The receive's pages are not mapped: the datagram is lost, as one with no receive
		// is, and the receive stays for the next once its driver has mapped them.
		qp.raiseFault(pf, false)
		d.stats.RxDropped.Add(1)
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("datagram from QP 0x%06x: its receive's pages are not mapped", f.DETH.SrcQP())})
		return
	}
	if !qp.takeRecv() {
		noRecv()
		return
	}
	rw := qp.resp.recv
	wc := WC{WRID: rw.id, Status: WCSuccess, Opcode: WCRecv, SrcQP: f.DETH.SrcQP(), Flags: WCWithGRH}
	if f.Info.Is(roce.FlagImm) {
		wc.Flags |= WCWithImm
		wc.Imm = f.ImmDt.Imm()
	}
	var grh [GRHLen]byte
	wc.NetworkHdrType = networkHeader(&grh, f)
	err := rw.err
	switch {
	case err != nil:
		wc.Status = WCLocQPOpErr
	case n > rw.length:
		err = fmt.Errorf("datagram of %d bytes with its GRH area into a receive of %d", n, rw.length)
		wc.Status = WCRemInvReqErr
	default:
		err = qp.scatterSGL(rw.sgl, 0, grh[:])
		if err == nil {
			err = qp.scatterSGL(rw.sgl, GRHLen, f.Payload)
		}
		if err != nil {
			wc.Status = accessStatus(err)
		}
	}
	if wc.Status == WCSuccess {
		wc.ByteLen = uint32(n)
	} else {
		wc.Err, wc.Flags, wc.NetworkHdrType = err, 0, 0
	}
	qp.finishRecv(wc, f.BTH.SE())
	if wc.Status != WCSuccess && wc.Status != WCRemInvReqErr {
		// The receive named memory the device cannot write: the QP's own failure.
		qp.toError(fmt.Sprintf("receive of a datagram failed: %v", err))
	}
}

// SourceAddr is the sender's address in a datagram's GRH area as networkHeader filled it, t
// being the completion's NetworkHdrType (ibv_create_ah_from_wc's reading of it).
func SourceAddr(grh []byte, t NetworkType) (netip.Addr, bool) {
	if len(grh) < GRHLen {
		return netip.Addr{}, false
	}
	switch t {
	case NetworkIPv6:
		return netip.AddrFrom16([16]byte(grh[8:24])), true
	case NetworkIPv4:
		return netip.AddrFrom4([4]byte(grh[20+12 : 20+16])), true
	}
	return netip.Addr{}, false
}

// networkHeader fills a datagram's GRH area as rxe does: an IPv6 packet's own 40-byte header,
// or for IPv4 20 zero bytes and the 20-byte IPv4 header (with its checksum as the header
// stands); and says which it was.
func networkHeader(grh *[GRHLen]byte, f *roce.Frame) NetworkType {
	ip := f.Buf[f.L3:f.L4]
	if f.IPv6 {
		copy(grh[:], ip)
		return NetworkIPv6
	}
	h := grh[20:]
	copy(h, ip)
	binary.BigEndian.PutUint16(h[10:], 0)
	binary.BigEndian.PutUint16(h[10:], roce.IPv4Checksum(h))
	return NetworkIPv4
}
