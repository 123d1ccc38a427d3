package engine

import (
	"sync/atomic"

	"github.com/softirdma/softirdma/wire/roce"
)

// The engine's locks guard its state and nothing else. What the engine produces for the world
// outside it while holding one (frames for the link, events for the sink, calls of a CQ's
// completion function) goes into the outbox, and flush carries it out once the locks are
// released: every verb, receive and timer ends with one. So a slow link, a pcap writer or a
// callback that calls back into the device never holds up (or deadlocks) the goroutines that post
// work, poll CQs or receive frames.
//
// One goroutine at a time empties the outbox, in the order things were put in it: whoever
// flushes with work waiting and finds nobody else at it, except that frames go out only from
// the device's clock (see flush). Others add to the outbox and leave;
// the one emptying it picks up what they added. A flusher that keeps finding more after
// maxFlushRounds hands the rest to a call on the device's clock rather than being kept from
// returning to its caller for ever by a busy peer. In the simulator all of this runs on the
// simulator's goroutine, in a fixed order, so a seed still gives one trace.

// outFrame is a frame waiting for the link.
type outFrame struct {
	b     []byte
	lent  bool // built in a buffer from the link's Buffer, so it goes back by SendBuffer
	local bool // addressed to the device itself: for the loopback, not the link
	// group: to a multicast group one of the device's own QPs is attached to: for the link, and
	// a copy for the device, as rxe's multicast comes back through the IP stack's multicast
	// loop to every attached QP of the host, the sender's too.
	group bool
	// sealed: built and sealed by the engine (a QP's frame, not a netdev's), for SendSealed.
	sealed bool
	// unsealed: built by the engine with its ICRC left for an UnsealedLink to compute; carryOut
	// seals it if it goes any other way.
	unsealed bool
}

type outbox struct {
	mu       mutex[outboxLock]
	frames   []outFrame
	events   []Event
	calls    []func()
	flushing bool // a goroutine is emptying the outbox
	later    bool // a flush is scheduled on the clock
	// pending says the outbox holds something, for flush to see without the lock that there
	// is nothing to do (the usual case for a verb).
	pending atomic.Bool
	// spare slices, swapped with the ones above so that neither side allocates
	frames2 []outFrame
	events2 []Event
	calls2  []func()
	txFree  [][]byte // buffers for links that do not lend theirs
	// linkBatch gathers the frames of one carryOut for a BatchLink; only the goroutine
	// flushing uses it.
	linkBatch [][]byte
	// sealedBatch gathers them for a SealedBatchLink, the same way.
	sealedBatch [][]byte
	// txFrames and txBytes count the frames send queued (Stats' TxFrames and TxBytes),
	// under the lock put takes anyway rather than with two more atomic adds per frame.
	txFrames, txBytes uint64
}

// maxFlushRounds bounds how many batches one flush carries out before handing over.
const maxFlushRounds = 4

// maxTxFree bounds the pool of frame buffers kept for links that do not lend buffers.
const maxTxFree = 256

func (o *outbox) empty() bool {
	return len(o.frames) == 0 && len(o.events) == 0 && len(o.calls) == 0
}

// put queues a frame.
func (o *outbox) put(f outFrame) {
	o.mu.Lock()
	o.frames = append(o.frames, f)
	o.markPending()
	o.mu.Unlock()
}

// markPending says the outbox holds something; the lock is held. It stores only when the flag
// changes: an atomic store is a full barrier, and a requester's run puts many frames.
func (o *outbox) markPending() {
	if !o.pending.Load() {
		o.pending.Store(true)
	}
}

// putEvent queues an event.
func (o *outbox) putEvent(e Event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.markPending()
	o.mu.Unlock()
}

// busy says whether frames are queued or being carried out.
func (o *outbox) busy() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.flushing || len(o.frames) > 0
}

// flush ends a verb or a receive: it carries out the events and calls waiting, unless another
// goroutine is at it, and hands waiting frames to the device's clock. Only the clock's goroutine
// carries frames to the link, because a link may hold its sender up (a paced fabric port, a full
// socket) and neither a verb nor a receive may wait for it, as a NIC's doorbell and its receive
// side do not wait for its transmit queue:
//   - a verb's caller may be the loop that answers a VM's register reads, which must keep
//     answering while the wire is paused (QEMU drops a function that does not answer in time);
//   - a receive's goroutine takes in the very ACKs a requester waits for, so waiting for the
//     link there would hold them up until the requester's retries run out.
//
// The clock runs the requesters, so it waits for the link in their place.
func (d *Device) flush() { d.carry(false) }

// flushAll carries out everything, frames included, unless another goroutine is at it: it ends
// a call on the device's clock, and Drain, whose caller asked to wait for the link.
func (d *Device) flushAll() { d.carry(true) }

// carry empties the outbox, one batch a round; mayFrames says the caller may carry frames out
// (see flush).
func (d *Device) carry(mayFrames bool) {
	o := &d.out
	if !o.pending.Load() {
		return
	}
	lockNoneHeld("carrying out the outbox")
	o.mu.Lock()
	if o.flushing || o.empty() {
		o.mu.Unlock()
		return
	}
	if !mayFrames && len(o.frames) > 0 {
		d.flushOnClock()
		o.mu.Unlock()
		return
	}
	o.flushing = true
	for round := 1; ; round++ {
		frames, events, calls := o.frames, o.events, o.calls
		o.frames, o.events, o.calls = o.frames2[:0], o.events2[:0], o.calls2[:0]
		o.pending.Store(false)
		o.mu.Unlock()
		d.carryOut(frames, events, calls)
		o.mu.Lock()
		for i, f := range frames {
			// Only whole frame buffers are kept: a netdev's frame (SendFrame) is its own size.
			if !f.lent && cap(f.b) >= MaxFrame && len(o.txFree) < maxTxFree {
				o.txFree = append(o.txFree, f.b[:cap(f.b)])
			}
			frames[i] = outFrame{}
		}
		clear(events)
		clear(calls)
		o.frames2, o.events2, o.calls2 = frames[:0], events[:0], calls[:0]
		if o.empty() {
			o.flushing = false
			o.mu.Unlock()
			return
		}
		if round == maxFlushRounds || !mayFrames && len(o.frames) > 0 {
			o.flushing = false
			d.flushOnClock()
			o.mu.Unlock()
			return
		}
	}
}

// flushOnClock has the clock's goroutine empty the outbox, once however often it is asked
// before then. The outbox is locked.
func (d *Device) flushOnClock() {
	if !d.out.later {
		d.out.later = true
		d.clock.Post(0, d.flushLater)
	}
}

// carryOut sends the frames, hands the events to the sink and makes the calls, in that order.
func (d *Device) carryOut(frames []outFrame, events []Event, calls []func()) {
	// The engine decided which frames are for the device itself when it sent them, so they go
	// to the loopback and the rest to the link behind it without a second look.
	att, sink, stopped := d.att.Load(), d.sink.Load(), d.stopped.Load()
	batch, sealed := d.out.linkBatch[:0], d.out.sealedBatch[:0]
	for _, f := range frames {
		if f.unsealed && (!f.lent || f.local || f.group || att.unsealer == nil) && f.b != nil && !stopped {
			// The link changed since the frame was built, or the frame stays with the device.
			_ = roce.SealFrame(f.b) // the engine's own frame: it parses
			f.unsealed = false
		}
		if f.group && f.b != nil && !stopped {
			d.loop.keep(f.b)
		}
		if f.lent {
			batch = sendBatch(att, batch) // the lender is the same link: frames keep their order
		}
		if f.b != nil && !stopped && !f.local && f.lent && f.sealed && !f.unsealed && att.sealedBatch != nil {
			sealed = append(sealed, f.b)
			continue
		}
		sealed = sendSealedBatch(att, sealed) // the frames before this one go first
		switch {
		case f.b == nil || stopped:
			if f.lent && att.lender != nil {
				att.lender.SendBuffer(nil) // give the buffer back
			}
		case f.local:
			d.loop.take(f.b, f.lent)
		case f.unsealed:
			att.unsealer.SendUnsealed(f.b)
		case f.lent && f.sealed && att.sealer != nil:
			att.sealer.SendSealed(f.b)
		case f.lent:
			if att.lender != nil {
				att.lender.SendBuffer(f.b)
			}
		case att.batch != nil:
			batch = append(batch, f.b)
		case att.link != nil:
			_ = att.link.Send(f.b)
		}
	}
	d.out.linkBatch = sendBatch(att, batch)
	d.out.sealedBatch = sendSealedBatch(att, sealed)
	if sink != nil {
		for _, e := range events {
			(*sink)(e)
		}
	}
	for _, c := range calls {
		c()
	}
}

// sendBatch sends the frames gathered for a BatchLink, and gives the slice back empty.
func sendBatch(att *attachment, batch [][]byte) [][]byte {
	if len(batch) > 0 {
		att.batch.SendFrames(batch)
		clear(batch)
	}
	return batch[:0]
}

// sendSealedBatch sends the frames gathered for a SealedBatchLink, and gives the slice back
// empty.
func sendSealedBatch(att *attachment, sealed [][]byte) [][]byte {
	if len(sealed) > 0 {
		att.sealedBatch.SendSealedBatch(sealed)
		clear(sealed)
	}
	return sealed[:0]
}

// flushLater empties the outbox on the clock's goroutine.
func (d *Device) flushLater() {
	d.out.mu.Lock()
	d.out.later = false
	d.out.pending.Store(true)
	d.out.mu.Unlock()
	d.flushAll()
}

// txBuffer is where the next frame is built: a buffer lent by the link, or one of the device's.
func (d *Device) txBuffer() []byte {
	if l := d.att.Load().lender; l != nil {
		return d.loop.buffer(l)
	}
	o := &d.out
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := len(o.txFree); n > 0 {
		b := o.txFree[n-1]
		o.txFree = o.txFree[:n-1]
		return b
	}
	return NewFrameBuffer(MaxFrame)
}

// send queues a frame built in a buffer from txBuffer and sealed for the link, or, local, for
// the device itself.
func (d *Device) send(frame []byte, local, sealed bool) {
	d.out.putSent(d.sentFrame(frame, local, sealed))
}

// sentFrame is the outbox's entry for a frame send queues; sealed false leaves its ICRC to the
// link (sealFor).
func (d *Device) sentFrame(frame []byte, local, sealed bool) outFrame {
	return outFrame{b: frame, lent: d.att.Load().lender != nil, local: local, sealed: true, unsealed: !sealed,
		group: !local && d.ngroups.Load() > 0 && d.ownGroup(frame)}
}

// putSent queues the frames of send (or of a QP's run, staged), counting them.
func (o *outbox) putSent(fs ...outFrame) {
	o.mu.Lock()
	o.frames = append(o.frames, fs...)
	for _, f := range fs {
		o.txFrames++
		o.txBytes += uint64(len(f.b))
	}
	o.markPending()
	o.mu.Unlock()
}

// sent is how many frames send has queued, and their bytes.
func (o *outbox) sent() (frames, bytes uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.txFrames, o.txBytes
}

// ownGroup says frame goes to a multicast group one of the device's QPs is attached to.
func (d *Device) ownGroup(frame []byte) bool {
	ip, ok := frameDstIP(frame)
	return ok && ip.IsMulticast() && len(d.group(ip.Unmap())) > 0
}

// dropBuffer gives back a buffer from txBuffer that carries no frame.
func (d *Device) dropBuffer(b []byte) {
	if d.att.Load().lender != nil {
		d.out.put(outFrame{lent: true})
		return
	}
	o := &d.out
	o.mu.Lock()
	if len(o.txFree) < maxTxFree {
		o.txFree = append(o.txFree, b[:cap(b)])
	}
	o.mu.Unlock()
}

// later queues a call to run after the engine's locks are released.
func (d *Device) later(f func()) {
	o := &d.out
	o.mu.Lock()
	o.calls = append(o.calls, f)
	o.markPending()
	o.mu.Unlock()
}
