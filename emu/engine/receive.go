package engine

import (
	"fmt"

	"github.com/softirdma/softirdma/wire/roce"
)

// Receive takes one frame from the link. Anything malformed, with a bad ICRC, not for this
// device or for no QP is counted and dropped without an answer, as IBTA asks. The frame is not
// kept after Receive returns.
func (d *Device) Receive(frame []byte) {
	defer d.flush()
	f := d.rxFrame()
	var h rxHeld
	d.receive(f, frame, false, &h)
	h.end(d)
	d.rxDone(f)
}

// ReceiveBatch is Receive for frames that arrived together, in order: what they make the device
// send goes out after the last one.
func (d *Device) ReceiveBatch(frames [][]byte) {
	d.ReceiveSealed(frames, nil)
}

// ReceiveSealed is ReceiveBatch for frames of which sealed[i] says that frames[i] is one another
// engine of this process built and sealed, handed over by a link that changed nothing on the way
// (SealedLink): its headers are parsed and checked as any frame's, its ICRC is not computed a
// second time. sealed shorter than frames leaves the rest unsealed.
func (d *Device) ReceiveSealed(frames [][]byte, sealed []bool) {
	defer d.flush()
	f := d.rxFrame()
	var h rxHeld
	for i, b := range frames {
		d.receive(f, b, i < len(sealed) && sealed[i], &h)
	}
	h.end(d)
	d.rxDone(f)
}

// rxHeld is the QP whose lock a batch's receive holds from one frame to the next: a burst for
// one QP (a message's packets, a READ's responses) takes its lock once. It also counts the
// batch's frames for Stats, added once at its end rather than with an atomic add per frame.
type rxHeld struct {
	qp              *QP
	frames, checked uint64 // RxFrames; those not sealed (RxSealed is the rest)
}

// end releases the QP held and adds the batch's counts to the device's. RxFrames goes first:
// a Stats between the two adds then finds RxSealed too high for a moment, never negative.
func (h *rxHeld) end(d *Device) {
	h.release()
	if h.frames > 0 {
		d.stats.RxFrames.Add(h.frames)
	}
	if h.checked > 0 {
		d.stats.rxChecked.Add(h.checked)
	}
}

// hold makes qp the QP held, releasing another.
func (h *rxHeld) hold(qp *QP) {
	if h.qp != qp {
		h.release()
		qp.mu.Lock()
		qp.beginPins() // the batch's copies for the QP share one pin scope
		h.qp = qp
	}
}

// release releases the QP held, if any.
func (h *rxHeld) release() {
	if h.qp != nil {
		h.qp.endPins()
		h.qp.mu.Unlock()
		h.qp = nil
	}
}

// rxFrame is a frame to parse into, for one receiving goroutine.
func (d *Device) rxFrame() *roce.Frame {
	if f, ok := d.rx.Get().(*roce.Frame); ok {
		return f
	}
	return new(roce.Frame)
}

// rxDone gives back a frame from rxFrame, holding on to no buffer.
func (d *Device) rxDone(f *roce.Frame) {
	f.Reset()
	d.rx.Put(f)
}

// receive takes one frame, parsing it into f; sealed says its ICRC was computed by an engine
// of this process and nothing changed it since (ReceiveSealed).
//
// h is the QP lock held from the frame before; receive takes the lock of the frame's QP into it,
// and releases it before a multicast frame's QPs take theirs.
func (d *Device) receive(f *roce.Frame, frame []byte, sealed bool, h *rxHeld) {
	if d.stopped.Load() || d.portDown.Load() {
		return
	}
	h.frames++
	var err error
	if sealed {
		err = d.parser.ParseHeaders(f, frame)
	} else {
		h.checked++
		err = d.parser.Parse(f, frame)
	}
	if err != nil {
		if roce.KindOf(err) == roce.KindNotRoCE && d.passOther(frame) {
			return
		}
		d.stats.RxDropped.Add(1)
		if roce.KindOf(err) == roce.KindBadICRC {
			d.stats.RxBadICRC.Add(1)
		} else {
			d.stats.RxMalformed.Add(1)
		}
		d.event(Event{Kind: EvDrop, Msg: "frame dropped", Err: err})
		return
	}
	dst := f.DstIP()
	if dst.IsMulticast() {
		h.release()
		d.receiveMulticast(f, frame)
		return
	}
	if !d.owns(dst) {
		if !d.passOther(frame) {
			d.stats.RxDropped.Add(1)
		}
		return
	}
	if !d.pkeyMatches(f) {
		return
	}
	qp := d.rxQPs.load(f.BTH.DestQP())
	if qp == nil || f.Info.Transport != qp.tr.wire {
		d.unknownQP(f)
		return
	}
	h.hold(qp)
	qp.receive(f)
}

// unknownQP drops a packet for a QP the device does not have.
func (d *Device) unknownQP(f *roce.Frame) {
	d.stats.RxDropped.Add(1)
	d.stats.RxUnknownQP.Add(1)
	d.event(Event{Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s for unknown QP 0x%06x", f.Opcode, f.BTH.DestQP())})
}

// receive hands a packet for the QP to its responder or its completer. The QP is locked.
func (qp *QP) receive(f *roce.Frame) {
	d := qp.dev
	if qp.destroyed {
		// Destroyed since the device found it.
		d.unknownQP(f)
		return
	}
	if qp.state < QPSRTR || qp.tr.connected && f.SrcIP().Unmap() != qp.attr.AH.DGID.Unmap() {
		d.stats.RxDropped.Add(1)
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s from %s while %s", f.Opcode, f.SrcIP(), qp.state)})
		return
	}
	if f.Info.Response {
		if qp.tr.response == nil {
			d.stats.RxDropped.Add(1)
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
	d.stats.RxDropped.Add(1)
	d.stats.RxBadPKey.Add(1)
	d.event(Event{Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s with P_Key 0x%04x, the port's is 0xffff", f.Opcode, f.BTH.PKey())})
	return false
}

// receiveMulticast hands a datagram sent to a multicast group to every UD QP attached to the
// group here, each checking it against its own Q_Key; a group with none here is not ours.
func (d *Device) receiveMulticast(f *roce.Frame, frame []byte) {
	qps := d.group(f.DstIP().Unmap())
	if len(qps) == 0 {
		if !d.passOther(frame) {
			d.stats.RxDropped.Add(1)
		}
		return
	}
	if !d.pkeyMatches(f) {
		return
	}
	if f.Info.Transport != roce.UD || f.BTH.DestQP() != McastQPN {
		d.stats.RxDropped.Add(1)
		d.event(Event{Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s to multicast group %s for QP 0x%06x", f.Opcode, f.DstIP(), f.BTH.DestQP())})
		return
	}
	for _, qp := range qps {
		qp.mu.Lock()
		if qp.state < QPSRTR || qp.destroyed {
			d.stats.RxDropped.Add(1)
		} else {
			qp.received()
			qp.udRequest(f)
		}
		qp.mu.Unlock()
	}
}
