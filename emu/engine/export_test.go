package engine

import (
	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire/roce"
)

// What the external tests (package engine_test, which run the engine on the simulator's fabric)
// need to see inside the engine: numbers to aim at and state to check.

const (
	PSNMask   = psnMask
	MaxNumber = maxNumber
)

var (
	PSNAdd     = psnAdd
	WCOpcodeOf = wcOpcodeOf
)

// GuestMemoryOf is what a REG_MR work request does with a guest page list.
func GuestMemoryOf(as keys.AddressSpace, pl *PageList) (keys.Memory, error) {
	m, _, err := guestMemory(as, pl)
	return m, err
}

// Builder is the frame builder of qp's path, for tests that forge frames of its own.
func (qp *QP) Builder() *roce.Builder { return &qp.builder }

// ExpectedPSN is the PSN the QP's responder expects next.
func (qp *QP) ExpectedPSN() uint32 {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.resp.psn
}

// RequesterPSNs are the next PSN the requester sends and the oldest it waits to have acknowledged.
func (qp *QP) RequesterPSNs() (sent, acked uint32) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.req.sentPSN, qp.req.compPSN
}

// SendQueueLen is how many work requests the send queue holds.
func (qp *QP) SendQueueLen() int {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.sq.n
}

// SetNextCQNum makes n the next CQ number tried.
func (d *Device) SetNextCQNum(n uint32) {
	d.tab.Lock()
	d.cqs.next = n
	d.tab.Unlock()
}

// BareMW is an MW of type typ that belongs to no device, for work requests refused before use.
func BareMW(typ MWType) *MW { return &MW{typ: typ} }
