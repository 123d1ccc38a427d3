package engine

import (
	"fmt"

	"github.com/softirdma/softirdma/wire/roce"
)

// Receive takes one frame from the link. Anything malformed, with a bad ICRC, not for this
// device or for no QP is counted and dropped without an answer, as IBTA asks. The frame is not
// kept after Receive returns.
func (d *Device) Receive(frame []byte) {
	d.mu.Lock()
	defer d.unlock()
	d.receive(frame)
}

// ReceiveBatch is Receive for frames that arrived together, in order, with one hold of the
// device lock: what they make the device send goes out after the last one.
func (d *Device) ReceiveBatch(frames [][]byte) {
	d.mu.Lock()
	defer d.unlock()
	for _, f := range frames {
		d.receive(f)
	}
}

func (d *Device) receive(frame []byte) {
	if d.stopped || d.portDown {
		return
	}
	d.stats.RxFrames++
	f := &d.rx
	if err := d.parser.Parse(f, frame); err != nil {
		if roce.KindOf(err) == roce.KindNotRoCE && d.passOther(frame) {
			return
		}
		d.stats.RxDropped++
		if roce.KindOf(err) == roce.KindBadICRC {
			d.stats.RxBadICRC++
		} else {
			d.stats.RxMalformed++
		}
		d.event(Event{Kind: EvDrop, Msg: "frame dropped", Err: err})
		return
	}
	dst := f.DstIP()
	if dst.IsMulticast() {
		d.receiveMulticast(f, frame)
		return
	}
	if !d.owns(dst) {
		if !d.passOther(frame) {
			d.stats.RxDropped++
		}
		return
	}
	if !d.pkeyMatches(f) {
		return
	}
	qp := d.qps[f.BTH.DestQP()]
	if qp == nil || f.Info.Transport != qp.tr.wire {
		d.stats.RxDropped++
		d.stats.RxUnknownQP++
		d.event(Event{Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s for unknown QP 0x%06x", f.Opcode, f.BTH.DestQP())})
		return
	}
	if qp.state < QPSRTR || qp.tr.connected && f.SrcIP().Unmap() != qp.attr.AH.DGID.Unmap() {
		d.stats.RxDropped++
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s from %s while %s", f.Opcode, f.SrcIP(), qp.state)})
		return
	}
	if f.Info.Response {
		if qp.tr.response == nil {
			d.stats.RxDropped++
			return
		}
		qp.received()
		qp.tr.response(qp, f)
		return
	}
	qp.received()
	qp.tr.request(qp, f)
}

// pkeyMatches checks a packet's P_Key against the port's one partition, the default: the low
// 15 bits must be all ones, and one of the two keys a full member's (rxe's pkey_match). A
// mismatch is dropped and counted.
func (d *Device) pkeyMatches(f *roce.Frame) bool {
	if f.BTH.PKey()&0x7fff == 0x7fff {
		return true
	}
	d.stats.RxDropped++
	d.stats.RxBadPKey++
	d.event(Event{Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s with P_Key 0x%04x, the port's is 0xffff", f.Opcode, f.BTH.PKey())})
	return false
}

// receiveMulticast hands a datagram sent to a multicast group to every UD QP attached to the
// group here, each checking it against its own Q_Key; a group with none here is not ours.
func (d *Device) receiveMulticast(f *roce.Frame, frame []byte) {
	qps := d.mcast[f.DstIP().Unmap()]
	if len(qps) == 0 {
		if !d.passOther(frame) {
			d.stats.RxDropped++
		}
		return
	}
	if !d.pkeyMatches(f) {
		return
	}
	if f.Info.Transport != roce.UD || f.BTH.DestQP() != McastQPN {
		d.stats.RxDropped++
		d.event(Event{Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s to multicast group %s for QP 0x%06x", f.Opcode, f.DstIP(), f.BTH.DestQP())})
		return
	}
	for _, qp := range qps {
		if qp.state < QPSRTR {
			d.stats.RxDropped++
			continue
		}
		qp.received()
		qp.udRequest(f)
	}
}
