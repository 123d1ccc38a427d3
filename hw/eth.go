package hw

import (
	"sync"
	"syscall"

	"github.com/softirdma/softirdma/hw/abi"
)

// ethRing is one of the Ethernet function's rings (abi eth.go): TX or RX descriptors in guest
// memory. Its lock orders the device's passes over it; the function's lock is not needed to
// deliver a frame, which arrives on the engine's goroutine.
type ethRing struct {
	mu      sync.Mutex
	r       *ring
	vector  int
	promisc bool
	cons    uint32
	dropped uint32
	gone    bool
	// frame is where a TX frame is read from guest memory: the engine copies what it sends,
	// so one buffer of the largest frame serves every descriptor.
	frame []byte
}

// createEthRingLocked makes the TX or RX ring (one of each). An RX ring takes the engine's
// frames that are not RoCEv2 for it from then on.
func (f *Function) createEthRingLocked(args abi.EthRingArgs) error {
	kind, vector, flags := args.Kind(), int(args.Vector()), args.Flags()
	switch {
	case kind != abi.EthTX && kind != abi.EthRX:
		return errf(syscall.EINVAL, "Ethernet ring kind %d", kind)
	case f.eth[kind] != nil:
		return errf(syscall.EBUSY, "the Ethernet function has its %s ring", ethKindName(kind))
	case vector >= abi.NumVectors:
		return errf(syscall.EINVAL, "MSI-X vector %d of %d", vector, abi.NumVectors)
	case flags&^abi.EthRingPromisc != 0:
		return errf(syscall.EINVAL, "Ethernet ring flags 0x%x", flags)
	}
	r, err := newRing(&f.mem, args.Queue(), abi.EthDescSize, abi.EthMaxLog)
	if err != nil {
		return err
	}
	e := &ethRing{r: r, vector: vector, promisc: flags&abi.EthRingPromisc != 0}
	f.eth[kind] = e
	if kind == abi.EthRX && f.dev != nil {
		dev := f.dev
		dev.OnOtherFrame(func(frame []byte) { f.ethReceive(e, dev.MAC(), frame) })
	}
	return nil
}

func ethKindName(kind uint8) string {
	if kind == abi.EthTX {
		return "TX"
	}
	return "RX"
}

// destroyEthRingLocked takes a ring away and answers how many frames it dropped.
func (f *Function) destroyEthRingLocked(kind uint8, result func(int, uint32)) error {
	if kind > abi.EthRX || f.eth[kind] == nil {
		return errf(syscall.ENOENT, "no Ethernet ring of kind %d", kind)
	}
	e := f.eth[kind]
	e.mu.Lock()
	e.gone = true
	result(abi.ResultEthDropped, e.dropped)
	e.mu.Unlock()
	f.eth[kind] = nil
	if kind == abi.EthRX && f.dev != nil {
		f.dev.OnOtherFrame(nil)
	}
	return nil
}

// ethTransmitLocked sends the frames the driver put in the TX ring up to its producer index
// prod, in order, and returns the vector to signal.
func (f *Function) ethTransmitLocked(prod uint32) []int {
	e := f.eth[abi.EthTX]
	if e == nil || f.dev == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return nil
	}
	prod &= e.r.mask()
	var b [abi.EthDescSize]byte
	desc := abi.EthDesc(b[:])
	sent := false
	for e.cons != prod {
		if e.r.access(e.r.elemOff(e.cons), desc, false) != nil {
			return nil // the ring's memory went: nothing more to send from it
		}
		addr, n := desc.Addr(), desc.Len()
		// The length is the guest's: checked before it sizes anything.
		if n < abi.EthMinFrame || n > abi.EthMaxFrame {
			e.dropped++
		} else {
			if e.frame == nil {
				e.frame = make([]byte, abi.EthMaxFrame)
			}
			if frame := e.frame[:n]; readGuest(&f.mem, addr, frame) != nil {
				e.dropped++
			} else {
				f.dev.SendFrame(frame)
			}
		}
		e.cons = (e.cons + 1) & e.r.mask()
		_ = e.r.writeU32(abi.QHConsumer, e.cons)
		sent = true
	}
	if !sent {
		return nil
	}
	return []int{e.vector}
}

// ethReceive puts a frame the engine did not take into the next buffer the driver posted on
// the RX ring, if it is for this function (its MAC, broadcast, multicast, or any with
// EthRingPromisc), and signals the ring's vector. It runs when the engine releases its lock,
// maybe inside a call the function made with its own lock held: it takes only the ring's.
func (f *Function) ethReceive(e *ethRing, mac [6]byte, frame []byte) {
	if len(frame) < abi.EthMinFrame || !e.promisc && frame[0]&1 == 0 && [6]byte(frame[0:6]) != mac {
		return
	}
	e.mu.Lock()
	if e.gone {
		e.mu.Unlock()
		return
	}
	ok := e.fill(f, frame)
	e.mu.Unlock()
	if ok {
		f.signal(e.vector)
	}
}

// fill writes frame into the next posted RX buffer; false if there is none, or it is too
// small, or its memory is gone (the frame is dropped and counted).
func (e *ethRing) fill(f *Function, frame []byte) bool {
	prod, err := e.r.readU32(abi.QHProducer)
	if err != nil || e.cons == prod&e.r.mask() {
		e.dropped++
		return false
	}
	var b [abi.EthDescSize]byte
	desc := abi.EthDesc(b[:])
	off := e.r.elemOff(e.cons)
	if e.r.access(off, desc, false) != nil {
		e.dropped++
		return false
	}
	if addr, room := desc.Addr(), desc.Len(); uint32(len(frame)) > room || writeGuest(&f.mem, addr, frame) != nil {
		// The buffer is used up all the same: the driver sees it come back empty.
		desc.SetLen(0)
		e.dropped++
	} else {
		desc.SetLen(uint32(len(frame)))
	}
	desc.SetFlags(abi.EthDescDone)
	if e.r.access(off+abi.EthDescLen, desc[abi.EthDescLen:], true) != nil {
		return false
	}
	e.cons = (e.cons + 1) & e.r.mask()
	_ = e.r.writeU32(abi.QHConsumer, e.cons)
	return true
}
