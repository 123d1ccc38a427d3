package driver

import (
	"fmt"
	"math/bits"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/hw/abi"
)

// ring is a queue in the arena in rxe's layout, whose header the driver fills.
type ring struct {
	d              *Driver
	addr, table    uint64
	pages          uint32
	logCount, logE uint8
}

func (d *Driver) newRing(logCount, logElem uint8) (*ring, error) {
	size := abi.QueueHeaderSize + uint64(1)<<logCount<<logElem
	pages := (size + 4095) / 4096
	if pages > abi.PLEntriesPerPage {
		return nil, fmt.Errorf("driver: a ring of %d bytes: %w", size, syscall.EINVAL)
	}
	addr, err := d.Alloc(pages * 4096)
	if err != nil {
		return nil, err
	}
	table, err := d.pageTable(addr, pages)
	if err != nil {
		return nil, err
	}
	r := &ring{d: d, addr: addr, table: table, pages: uint32(pages), logCount: logCount, logE: logElem}
	if err := r.put(abi.QHLogElemSize, uint32(logElem)); err != nil {
		return nil, err
	}
	return r, r.put(abi.QHIndexMask, r.mask())
}

// free gives the ring back to the arena, its page table first: newRing allocated it last.
func (r *ring) free() {
	r.d.free(r.table, 4096)
	r.d.free(r.addr, uint64(r.pages)*4096)
}

func (r *ring) mask() uint32 { return 1<<r.logCount - 1 }

// putArgs describes the ring in q.
func (r *ring) putArgs(q abi.QueueArgs) {
	q.SetLogCount(r.logCount)
	q.SetLogElem(r.logE)
	putPageList(q.Pages(), r.table, r.pages)
}

func (r *ring) get(off uint64) (uint32, error) {
	var b [4]byte
	err := r.d.bus.ReadMem(r.addr+off, b[:])
	return le.Uint32(b[:]), err
}

func (r *ring) put(off uint64, v uint32) error {
	var b [4]byte
	le.PutUint32(b[:], v)
	return r.d.bus.WriteMem(r.addr+off, b[:])
}

func (r *ring) elem(i uint32) uint64 {
	return r.addr + abi.QueueHeaderSize + uint64(i&r.mask())<<r.logE
}

// WC is a completion, as ib_uverbs_wc carries it.
type WC struct {
	WRID                uint64
	Status, Opcode      uint32 // IBV_WC_*
	ByteLen, Imm, QPNum uint32 // Imm in host order
	SrcQP, Flags        uint32
}

// CQ is a completion queue in the arena.
type CQ struct {
	r         *ring
	Num, Slot uint32
	cons      uint32
}

// EQ is an event queue in the arena, signalling an MSI-X vector.
type EQ struct {
	r      *ring
	Num    uint32
	Vector uint16
	cons   uint32
}

// CreateEQ creates an event queue of 2^logCount entries: completion events (kind
// abi.EQCompletion) or async events (abi.EQAsync), signalling vector.
func (d *Driver) CreateEQ(logCount uint8, kind uint8, vector uint16) (*EQ, error) {
	r, err := d.newRing(logCount, 4)
	if err != nil {
		return nil, err
	}
	args := make(abi.CreateEQArgs, abi.CreateEQArgsSize)
	putPageList(args.Pages(), r.table, r.pages)
	args.SetLogCount(logCount)
	args.SetKind(kind)
	args.SetVector(vector)
	res, err := d.Command(abi.OpCreateEQ, args)
	if err != nil {
		r.free()
		return nil, err
	}
	return &EQ{r: r, Num: res[abi.ResultNum], Vector: vector}, nil
}

// Destroy destroys the EQ (EBUSY while a CQ sends it events) and gives its ring back.
func (e *EQ) Destroy() error {
	return e.r.d.destroy(abi.OpDestroyEQ, e.Num, e.r)
}

// destroy runs a destroy command and, once the device has let go of the object's rings (given
// in the order they were made), frees them.
func (d *Driver) destroy(op uint16, num uint32, rings ...*ring) error {
	if _, err := d.Command(op, numArgs(num)); err != nil {
		return err
	}
	freeRings(rings...)
	return nil
}

// freeRings frees rings given in the order they were made, latest first, which is the order in
// which the arena can take them back; nil ones are skipped.
func freeRings(rings ...*ring) {
	for i := len(rings) - 1; i >= 0; i-- {
		if rings[i] != nil {
			rings[i].free()
		}
	}
}

// Event is an EQ entry: a completion event's CQ number, or an async event's type and object.
type Event struct {
	Type uint8
	Num  uint32
}

// Poll takes the EQ's new entries.
func (e *EQ) Poll() ([]Event, error) {
	prod, err := e.r.get(abi.QHProducer)
	if err != nil {
		return nil, err
	}
	var out []Event
	b := make(abi.EQEntry, abi.EQEntrySize)
	for e.cons != prod&e.r.mask() {
		if err := e.r.d.bus.ReadMem(e.r.elem(e.cons), b); err != nil {
			return out, err
		}
		out = append(out, Event{Type: b.Type(), Num: b.Num()})
		e.cons = (e.cons + 1) & e.r.mask()
	}
	return out, e.r.put(abi.QHConsumer, e.cons)
}

// cqElemLog makes 64-byte entries, room for an ib_uverbs_wc.
const cqElemLog = 6

// CreateCQ creates a CQ of 2^logCount entries (one stays empty), its events in eq (nil: none).
func (d *Driver) CreateCQ(logCount uint8, eq *EQ) (*CQ, error) {
	r, err := d.newRing(logCount, cqElemLog)
	if err != nil {
		return nil, err
	}
	eqn := uint32(abi.CQNoEQ)
	if eq != nil {
		eqn = eq.Num
	}
	args := make(abi.CreateCQArgs, abi.CreateCQArgsSize)
	r.putArgs(args.Queue())
	args.SetEQ(eqn)
	res, err := d.Command(abi.OpCreateCQ, args)
	if err != nil {
		r.free()
		return nil, err
	}
	return &CQ{r: r, Num: res[abi.ResultNum], Slot: res[abi.ResultSlot]}, nil
}

// Destroy destroys the CQ (EBUSY while a QP uses it) and gives its ring back.
func (c *CQ) Destroy() error {
	return c.r.d.destroy(abi.OpDestroyCQ, c.Num, c.r)
}

// Resize moves the CQ to a new ring of 2^logCount entries. The device carries the completions
// not yet polled over to the start of the new ring, in order, so Poll goes on from there; too
// many for the new ring is EINVAL and leaves the CQ as it was. The old ring goes back to the
// arena where the arena can take it.
func (c *CQ) Resize(logCount uint8) error {
	d := c.r.d
	r, err := d.newRing(logCount, cqElemLog)
	if err != nil {
		return err
	}
	args := make(abi.ResizeCQArgs, abi.ResizeCQArgsSize)
	args.SetNum(c.Num)
	r.putArgs(args.Queue())
	if _, err := d.Command(abi.OpResizeCQ, args); err != nil {
		r.free()
		return err
	}
	old := c.r
	c.r, c.cons = r, 0
	old.free()
	return nil
}

// Moderate sets the CQ's event moderation (ib_modify_cq): once armed and fired, its event waits
// for count completions or period, whichever comes first; 0 and 0 announce each at once. A
// period is whole microseconds, at most abi.CQModMaxPeriod of them, and a device without
// abi.CapCQModeration refuses it (EOPNOTSUPP).
func (c *CQ) Moderate(count uint16, period time.Duration) error {
	us := period / time.Microsecond
	if period < 0 || us > abi.CQModMaxPeriod {
		return fmt.Errorf("driver: CQ moderation period %v is not 0..%dus", period, abi.CQModMaxPeriod)
	}
	args := make(abi.ModifyCQArgs, abi.ModifyCQArgsSize)
	args.SetNum(c.Num)
	args.SetCount(count)
	args.SetPeriod(uint16(us))
	_, err := c.r.d.Command(abi.OpModifyCQ, args)
	return err
}

// Arm arms the CQ for its next completion (solicited: only a solicited one, or an error).
func (d *Driver) Arm(c *CQ, solicited bool) error {
	v := uint32(abi.ArmNext)
	if solicited {
		v = abi.ArmSolicited
	}
	return d.bus.WriteReg(abi.BARDoorbell, abi.CQArm(c.Slot), v)
}

// Len is the number of completions waiting to be polled.
func (c *CQ) Len() (int, error) {
	prod, err := c.r.get(abi.QHProducer)
	return int((prod - c.cons) & c.r.mask()), err
}

// Poll takes up to max completions, oldest first.
func (c *CQ) Poll(max int) ([]WC, error) {
	prod, err := c.r.get(abi.QHProducer)
	if err != nil {
		return nil, err
	}
	var out []WC
	b := make(abi.CQE, abi.CQESize)
	for c.cons != prod&c.r.mask() && len(out) < max {
		if err := c.r.d.bus.ReadMem(c.r.elem(c.cons), b); err != nil {
			return out, err
		}
		wc := WC{WRID: b.WRID(), Status: b.Status(), Opcode: b.Opcode(), ByteLen: b.ByteLen(), Imm: b.Imm(),
			QPNum: b.QPNum(), SrcQP: b.SrcQP(), Flags: b.WCFlags()}
		if wc.Flags&2 != 0 { // IBV_WC_WITH_IMM: imm_data is in network order
			wc.Imm = bits.ReverseBytes32(wc.Imm)
		}
		out = append(out, wc)
		c.cons = (c.cons + 1) & c.r.mask()
	}
	if len(out) > 0 {
		return out, c.r.put(abi.QHConsumer, c.cons)
	}
	return out, nil
}
