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
	if !d.owns(f.DstIP()) {
		if !d.passOther(frame) {
			d.stats.RxDropped++
		}
		return
	}
	qp := d.qps[f.BTH.DestQP()]
	if qp == nil || f.Info.Transport != roce.RC {
		d.stats.RxDropped++
		d.stats.RxUnknownQP++
		d.event(Event{Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s for unknown QP 0x%06x", f.Opcode, f.BTH.DestQP())})
		return
	}
	if qp.state < QPSRTR || f.SrcIP().Unmap() != qp.attr.AH.DGID.Unmap() {
		d.stats.RxDropped++
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s from %s while %s", f.Opcode, f.SrcIP(), qp.state)})
		return
	}
	qp.received()
	if f.Info.Response {
		qp.onResponse(f)
	} else {
		qp.onRequest(f)
	}
}
