package ucontext

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/host/uverbs"
	"github.com/softirdma/softirdma/hw/abi"
)

// progMem is a program's memory as the test lays it out: bytes at a base address, which a
// copy outside fails (as process_vm_readv does on an unmapped address).
type progMem struct {
	mu       sync.Mutex // the copies are another process's: the test reads under it
	base     uint64
	mem      []byte
	unmapped bool // the program unmapped it all: every copy fails
}

// bytes is a copy of n bytes at offset off.
func (p *progMem) bytes(off, n int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte{}, p.mem[off:off+n]...)
}

func (p *progMem) at(addr uint64, n int) ([]byte, error) {
	if p.unmapped || addr < p.base || addr-p.base+uint64(n) > uint64(len(p.mem)) {
		return nil, syscall.EFAULT
	}
	return p.mem[addr-p.base : addr-p.base+uint64(n)], nil
}

func (p *progMem) ReadAt(b []byte, addr uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := p.at(addr, len(b))
	if err == nil {
		copy(b, s)
	}
	return err
}

func (p *progMem) WriteAt(b []byte, addr uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := p.at(addr, len(b))
	if err == nil {
		copy(s, b)
	}
	return err
}

// nowhere is a link that carries nothing: the test's traffic stays on one device.
type nowhere struct{}

func (nowhere) Send([]byte) error { return nil }

// respAddr is where the test's commands ask for their responses.
const respAddr = 0x7000_0000

var loopGID = netip.MustParseAddr("127.0.0.1")

func testDevice(t *testing.T) *Device { return testDeviceOn(t, realtime.NewWallClock()) }

// testDeviceOn is testDevice on clock.
func testDeviceOn(t *testing.T, clock engine.Clock) *Device {
	t.Helper()
	e := engine.NewDevice(engine.DeviceConfig{Name: "rxe0", Clock: clock, IP: loopGID,
		Resolve: func(netip.Addr) ([6]byte, bool) { return [6]byte{2, 0, 0, 0, 0, 1}, true }})
	e.Attach(nowhere{}) // the loopback turns back frames to its own address before the link
	t.Cleanup(e.Stop)
	return &Device{Engine: e, NodeGUID: 0x020000fffe000000,
		GIDs: []netip.Addr{netip.MustParseAddr("fe80::200:ff:fe00:0"), netip.MustParseAddr("fe80::200:ff:fe00:0"), loopGID, loopGID}}
}

// program is one test program: its context, its memory and its command file.
type program struct {
	t    *testing.T
	c    *Context
	mem  *progMem
	file *os.File
}

func newProgram(t *testing.T, d *Device) *program {
	t.Helper()
	p := &program{t: t, mem: &progMem{base: 0x10000, mem: make([]byte, 1<<20)}}
	c, f, err := New(d, p.mem, t.Name(), 1)
	if err != nil {
		t.Fatal(err)
	}
	p.c, p.file = c, f
	t.Cleanup(func() { c.Close(); f.Close() })
	return p
}

// legacy frames a legacy command: its core (which starts with the response address when the
// command has one) and the response's length in bytes.
func legacy(cmd uint32, core []byte, out int) []byte {
	b := make([]byte, 8, 8+len(core))
	binary.LittleEndian.PutUint32(b, cmd)
	binary.LittleEndian.PutUint16(b[4:], uint16((8+len(core))/4))
	binary.LittleEndian.PutUint16(b[6:], uint16(out/4))
	return append(b, core...)
}

// words lays out little-endian fields: uint64, uint32, uint16 and uint8 values, and byte slices.
func words(fields ...any) []byte {
	var b []byte
	for _, f := range fields {
		switch v := f.(type) {
		case uint64:
			b = binary.LittleEndian.AppendUint64(b, v)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case uint16:
			b = binary.LittleEndian.AppendUint16(b, v)
		case uint8:
			b = append(b, v)
		case []byte:
			b = append(b, v...)
		default:
			panic("words: unknown field type")
		}
	}
	return b
}

// run executes a command that must succeed and returns what it wrote at the response address
// (core and driver parts together).
func (p *program) run(cmd []byte, in *os.File) ([]byte, Reply) {
	p.t.Helper()
	r := p.c.Execute(cmd, in)
	if r.Ret != int32(len(cmd)) {
		p.t.Fatalf("command %d: write returned %d (%v), want %d", binary.LittleEndian.Uint32(cmd), r.Ret, syscall.Errno(-r.Ret), len(cmd))
	}
	var resp []byte
	for _, w := range r.Writes {
		if w.File < 0 && w.Addr >= respAddr && w.Addr-respAddr == uint64(len(resp)) {
			resp = append(resp, w.Data...)
		}
	}
	return resp, r
}

// refused runs a command that must fail with want.
func (p *program) refused(name string, cmd []byte, want syscall.Errno) {
	p.t.Helper()
	if r := p.c.Execute(cmd, nil); r.Ret != -int32(want) {
		p.t.Errorf("%s: write returned %d, want -%d (%v)", name, r.Ret, want, want)
	}
}

func (p *program) open() {
	p.t.Helper()
	resp, r := p.run(legacy(uverbs.CmdGetContext, words(uint64(respAddr)), 8), nil)
	if len(r.Files) != 1 || binary.LittleEndian.Uint32(resp[4:]) != 1 {
		p.t.Fatalf("GET_CONTEXT: %d files, num_comp_vectors %d; want the async event file and 1", len(r.Files), binary.LittleEndian.Uint32(resp[4:]))
	}
	closeFiles(r)
}

func closeFiles(r Reply) {
	for _, f := range r.Files {
		f.Close()
	}
}

func u32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }

// TestCommandsNeedAContext: every command but GET_CONTEXT is EINVAL before it, as the kernel's
// ib_uverbs_get_ucontext refuses; a second GET_CONTEXT is EINVAL too.
func TestCommandsNeedAContext(t *testing.T) {
	p := newProgram(t, testDevice(t))
	p.refused("ALLOC_PD before GET_CONTEXT", legacy(uverbs.CmdAllocPD, words(uint64(respAddr)), 4), syscall.EINVAL)
	p.open()
	p.refused("a second GET_CONTEXT", legacy(uverbs.CmdGetContext, words(uint64(respAddr)), 8), syscall.EINVAL)
	p.refused("a header shorter than 8 bytes", []byte{3, 0, 0, 0}, syscall.EINVAL)
	p.refused("an unknown command", legacy(55, words(uint64(respAddr)), 4), syscall.EOPNOTSUPP)
	if p.c.Refused() != 4 {
		t.Errorf("Refused() = %d, want 4", p.c.Refused())
	}
}

// TestObjectErrnos: the errnos the kernel gives for handles and numbers a program gets wrong.
func TestObjectErrnos(t *testing.T) {
	p := newProgram(t, testDevice(t))
	p.open()
	resp, _ := p.run(legacy(uverbs.CmdAllocPD, words(uint64(respAddr)), 4), nil)
	pdh := u32(resp, 0)
	reg := func(start, length, iova uint64, pd, access uint32) []byte {
		return legacy(uverbs.CmdRegMR, words(uint64(respAddr), start, length, iova, pd, access), 12)
	}
	p.refused("REG_MR on an unknown PD", reg(0x10000, 4096, 0x10000, pdh+100, 1), syscall.EINVAL)
	p.refused("REG_MR with an unknown access bit", reg(0x10000, 4096, 0x10000, pdh, 1<<15), syscall.EOPNOTSUPP)
	p.refused("REG_MR whose iova differs within the page", reg(0x10000, 4096, 0x10010, pdh, 1), syscall.EINVAL)
	p.refused("REG_MR of no bytes", reg(0x10000, 0, 0x10000, pdh, 1), syscall.EINVAL)
	resp, _ = p.run(reg(0x10000, 4096, 0x10000, pdh, 1), nil)
	mrh := u32(resp, 0)
	if u32(resp, 4) != u32(resp, 8) || u32(resp, 4) == 0 {
		t.Errorf("REG_MR lkey 0x%x rkey 0x%x: want one nonzero key", u32(resp, 4), u32(resp, 8))
	}
	p.refused("DEALLOC_PD with an MR on it", legacy(uverbs.CmdDeallocPD, words(pdh), 0), syscall.EBUSY)
	p.refused("DEREG_MR of an unknown handle", legacy(uverbs.CmdDeregMR, words(mrh+7), 0), syscall.EINVAL)
	p.run(legacy(uverbs.CmdDeregMR, words(mrh), 0), nil)
	p.run(legacy(uverbs.CmdDeallocPD, words(pdh), 0), nil)
	p.refused("DEALLOC_PD twice", legacy(uverbs.CmdDeallocPD, words(pdh), 0), syscall.EINVAL)
	p.refused("QUERY_PORT of port 2", legacy(uverbs.CmdQueryPort, words(uint64(respAddr), uint8(2), make([]byte, 7)), 40), syscall.EINVAL)
	resp, _ = p.run(legacy(uverbs.CmdQueryPort, words(uint64(respAddr), uint8(1), make([]byte, 7)), 40), nil)
	if resp[26] != portStateActive || resp[37] != linkEthernet || u32(resp, 16) != 4 {
		t.Errorf("QUERY_PORT: state %d, link layer %d, GID table %d; want 4, 2 (Ethernet), 4", resp[26], resp[37], u32(resp, 16))
	}
}

// ring is the test program's view of a queue the context answered: the memfd's pages at the
// offset and size of its mmap info.
func (p *program) ring(info []byte) []byte {
	p.t.Helper()
	off, size := binary.LittleEndian.Uint64(info), binary.LittleEndian.Uint32(info[8:])
	m, err := unix.Mmap(int(p.file.Fd()), int64(off), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		p.t.Fatalf("mapping a queue at %d (+%d): %v", off, size, err)
	}
	p.t.Cleanup(func() { _ = unix.Munmap(m) })
	return m
}

// rcEnd is one side of the RC test: a PD, an MR over its memory, a CQ and a QP, and the rings.
type rcEnd struct {
	p           *program
	mrKey, qpn  uint32
	qph, cqh    uint32
	sq, rq, cqr []byte
}

func newRCEnd(t *testing.T, d *Device) *rcEnd { return newRCEndOn(t, d, nil) }

// newRCEndOn is newRCEnd with its CQ's events on a completion channel: ch is set to the
// program's end of it.
func newRCEndOn(t *testing.T, d *Device, ch **os.File) *rcEnd { return newEndOf(t, d, ch, 2) }

// newEndOf is newRCEndOn with a QP of typ (enum ibv_qp_type: 2 RC, 4 UD).
func newEndOf(t *testing.T, d *Device, ch **os.File, typ uint8) *rcEnd {
	p := newProgram(t, d)
	p.open()
	chfd, in := uint32(0xffffffff), (*os.File)(nil)
	if ch != nil {
		_, r := p.run(legacy(uverbs.CmdCreateCompChannel, words(uint64(respAddr)), 4), nil)
		*ch = r.Files[0]
		t.Cleanup(func() { r.Files[0].Close() })
		chfd, in = 9, r.Files[0]
	}
	resp, _ := p.run(legacy(uverbs.CmdAllocPD, words(uint64(respAddr)), 4), nil)
	pdh := u32(resp, 0)
	resp, _ = p.run(legacy(uverbs.CmdRegMR, words(uint64(respAddr), p.mem.base, uint64(8192), p.mem.base, pdh, uint32(0xf)), 12), nil)
	e := &rcEnd{p: p, mrKey: u32(resp, 4)}
	resp, _ = p.run(legacy(uverbs.CmdCreateCQ, words(uint64(respAddr), uint64(0xcafe), uint32(15), uint32(0), chfd, uint32(0)), 8+16), in)
	e.cqh = u32(resp, 0)
	e.cqr = p.ring(resp[8:])
	create := words(uint64(respAddr), uint64(0xbeef), pdh, e.cqh, e.cqh, uint32(0), uint32(15), uint32(15),
		uint32(2), uint32(2), uint32(64), uint8(0), typ, uint8(0), uint8(0))
	resp, _ = p.run(legacy(uverbs.CmdCreateQP, create, 32+32), nil)
	e.qph, e.qpn = u32(resp, 0), u32(resp, 4)
	e.rq, e.sq = p.ring(resp[32:48]), p.ring(resp[48:64])
	return e
}

// modify runs MODIFY_QP on the QP with mask (enum ibv_qp_attr_mask) and the attributes set writes.
func (e *rcEnd) modify(mask uint32, set func(b []byte)) {
	core := make([]byte, 112)
	binary.LittleEndian.PutUint32(core[mqHandle:], e.qph)
	binary.LittleEndian.PutUint32(core[mqMask:], mask)
	set(core)
	e.p.run(legacy(uverbs.CmdModifyQP, core, 0), nil)
}

// connect moves the QP along: INIT, RTR to the peer's QPN, RTS.
func (e *rcEnd) connect(peer uint32) {
	mod := e.modify
	mod(1|1<<3|1<<4|1<<5, func(b []byte) { b[mqState], b[mqPort] = 1, 1; binary.LittleEndian.PutUint32(b[mqAccess:], 0xf) })
	mod(1|1<<7|1<<8|1<<12|1<<15|1<<17|1<<20, func(b []byte) {
		g := loopGID.As16()
		copy(b[mqDest:], g[:])
		b[mqDest+24], b[mqDest+25], b[mqDest+30], b[mqDest+31] = 3, 64, 1, 1
		b[mqState], b[mqPathMTU], b[mqMaxDestRd], b[mqMinRNR] = 2, 3, 1, 12
		binary.LittleEndian.PutUint32(b[mqDestQPN:], peer)
	})
	mod(1|1<<9|1<<10|1<<11|1<<13|1<<16, func(b []byte) { b[mqState], b[mqTimeout], b[mqRetry], b[mqRNRRetry], b[mqMaxRdAtomic] = 3, 14, 7, 7, 1 })
}

// TestRCWriteThroughTheRings: a program writes an RDMA WRITE WQE into its send queue's ring
// and rings the doorbell; the bytes land in the other program's memory and the completion in
// the first one's CQ ring, as rxe's provider would find them.
func TestRCWriteThroughTheRings(t *testing.T) {
	d := testDevice(t)
	a, b := newRCEnd(t, d), newRCEnd(t, d)
	a.connect(b.qpn)
	b.connect(a.qpn)
	copy(a.p.mem.mem[100:], "host path")
	a.postWrite(b.mrKey, 0x77)
	cqe := waitCQE(t, a.cqr)
	if got := binary.LittleEndian.Uint64(cqe); got != 0x77 || u32(cqe, 8) != 0 || u32(cqe, 12) != 1 || u32(cqe, 28) != a.qpn {
		t.Fatalf("CQE wr_id 0x%x status %d opcode %d qp 0x%x; want 0x77, 0 (success), 1 (RDMA_WRITE), 0x%x", got, u32(cqe, 8), u32(cqe, 12), u32(cqe, 28), a.qpn)
	}
	if got := b.p.mem.bytes(4000, 9); !bytes.Equal(got, []byte("host path")) {
		t.Fatalf("the peer's memory holds %q, want %q", got, "host path")
	}
	if u32(a.sq, 256) != 1 {
		t.Errorf("send queue consumer %d after the completion, want 1", u32(a.sq, 256))
	}
}

// postWrite posts a signalled 9-byte RDMA WRITE from byte 100 of the program's MR to byte 4000
// of the peer's, in the send queue's next slot, and rings the doorbell.
func (a *rcEnd) postWrite(rkey uint32, id uint64) {
	a.postWQE(id, 0, 100, 9, func(wqe []byte) { // IBV_WR_RDMA_WRITE
		binary.LittleEndian.PutUint64(wqe[24:], 0x10000+4000)
		binary.LittleEndian.PutUint32(wqe[32:], rkey)
	})
}

// postWQE posts a signalled work request of opcode op (enum ibv_wr_opcode) gathering n bytes
// from byte off of the program's MR, its remote part written by remote, in the send queue's
// next slot, and rings the doorbell.
func (a *rcEnd) postWQE(id uint64, op, off, n uint32, remote func(wqe []byte)) {
	logElem := u32(a.sq, 0)
	prod := u32(a.sq, 128)
	wqe := a.sq[384+int(prod)<<logElem : 384+int(prod+1)<<logElem]
	binary.LittleEndian.PutUint64(wqe[0:], id) // wr_id
	binary.LittleEndian.PutUint32(wqe[12:], op)
	binary.LittleEndian.PutUint32(wqe[16:], 2) // IBV_SEND_SIGNALED
	remote(wqe)
	binary.LittleEndian.PutUint32(wqe[184:], n) // dma.length
	binary.LittleEndian.PutUint32(wqe[196:], 1) // dma.num_sge
	binary.LittleEndian.PutUint64(wqe[208:], 0x10000+uint64(off))
	binary.LittleEndian.PutUint32(wqe[216:], n)
	binary.LittleEndian.PutUint32(wqe[220:], a.mrKey)
	binary.LittleEndian.PutUint32(a.sq[128:], prod+1) // producer
	a.p.run(legacy(uverbs.CmdPostSend, words(uint64(respAddr), a.qph, uint32(0), uint32(0), uint32(128)), 4), nil)
}

// TestDestroyCQCountsTheEventsRead: DESTROY_CQ answers the completion events the program read,
// and takes back the one it did not, which the program then never reads (the kernel drops a
// destroyed CQ's events: libibverbs waits for exactly that many acknowledgements, and an
// event read after would hand the program a freed CQ).
func TestDestroyCQCountsTheEventsRead(t *testing.T) {
	d := testDevice(t)
	var ch *os.File
	a, b := newRCEndOn(t, d, &ch), newRCEnd(t, d)
	a.connect(b.qpn)
	b.connect(a.qpn)
	notify := func() { a.p.run(legacy(uverbs.CmdReqNotifyCQ, words(a.cqh, uint32(0)), 0), nil) }
	notify()
	a.postWrite(b.mrKey, 1)
	ev := make([]byte, 16)
	if n, err := ch.Read(ev); err != nil || n != 8 || binary.LittleEndian.Uint64(ev) != 0xcafe {
		t.Fatalf("completion event: %d bytes %x (%v); want 8 naming the CQ's user_handle 0xcafe", n, ev[:max(n, 0)], err)
	}
	notify()
	a.postWrite(b.mrKey, 2)
	waitFor(t, func() bool { return u32(a.cqr, 128) == 2 })
	waitFor(t, func() bool { n, _ := unix.IoctlGetInt(int(ch.Fd()), unix.SIOCINQ); return n > 0 })
	// The QP goes first (DESTROY_CQ of a CQ in use is EBUSY).
	a.p.refused("DESTROY_CQ of a CQ a QP uses", legacy(uverbs.CmdDestroyCQ, words(uint64(respAddr), a.cqh, uint32(0)), 8), syscall.EBUSY)
	a.p.run(legacy(uverbs.CmdDestroyQP, words(uint64(respAddr), a.qph, uint32(0)), 4), nil)
	resp, _ := a.p.run(legacy(uverbs.CmdDestroyCQ, words(uint64(respAddr), a.cqh, uint32(0)), 8), nil)
	if u32(resp, 0) != 1 || u32(resp, 4) != 0 {
		t.Fatalf("DESTROY_CQ reported %d completion and %d async events, want 1 (the one read) and 0", u32(resp, 0), u32(resp, 4))
	}
	if n, _ := unix.IoctlGetInt(int(ch.Fd()), unix.SIOCINQ); n != 0 {
		t.Fatalf("%d bytes of events left on the channel after DESTROY_CQ, want none", n)
	}
}

// waitFor waits for cond, for ten seconds at most.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// waitCQE waits for the CQ ring's first completion and returns it.
func waitCQE(t *testing.T, cq []byte) []byte {
	t.Helper()
	waitFor(t, func() bool { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&cq[128]))) != 0 })
	return cq[384 : 384+48]
}

// TestGarbageInTheSendQueue: a program that writes garbage into its send queue (an opcode
// past the byte, more SGEs than the QP takes, a producer index past the ring) gets error
// completions in their place, LOC_QP_OP_ERR, and softirdma goes on.
func TestGarbageInTheSendQueue(t *testing.T) {
	d := testDevice(t)
	a, b := newRCEnd(t, d), newRCEnd(t, d)
	a.connect(b.qpn)
	b.connect(a.qpn)
	logElem := u32(a.sq, 0)
	for i, fill := range []func(w []byte){
		func(w []byte) { binary.LittleEndian.PutUint32(w[12:], 0x1234) },
		func(w []byte) { binary.LittleEndian.PutUint32(w[196:], 1000) },
	} {
		w := a.sq[384+i<<logElem : 384+(i+1)<<logElem]
		clear(w)
		binary.LittleEndian.PutUint64(w, uint64(100+i))
		binary.LittleEndian.PutUint32(w[16:], 2) // signalled
		fill(w)
	}
	binary.LittleEndian.PutUint32(a.sq[128:], 0xffff0002) // masked to 2
	a.p.run(legacy(uverbs.CmdPostSend, words(uint64(respAddr), a.qph, uint32(0), uint32(0), uint32(128)), 4), nil)
	waitFor(t, func() bool { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&a.cqr[128]))) >= 1 })
	cqe := a.cqr[384 : 384+48]
	if binary.LittleEndian.Uint64(cqe) != 100 || u32(cqe, 8) != 2 {
		t.Fatalf("first CQE wr_id %d status %d, want 100 and LOC_QP_OP_ERR (2)", binary.LittleEndian.Uint64(cqe), u32(cqe, 8))
	}
	// The program still has its device: a new one opens and queries it.
	p := newProgram(t, d)
	p.open()
}

// toUnmapped is two connected RC ends, b's program having unmapped the memory it registered.
func toUnmapped(t *testing.T) (a, b *rcEnd) {
	d := testDevice(t)
	a, b = newRCEnd(t, d), newRCEnd(t, d)
	a.connect(b.qpn)
	b.connect(a.qpn)
	b.p.mem.mu.Lock()
	b.p.mem.unmapped = true
	b.p.mem.mu.Unlock()
	return a, b
}

// TestWriteIntoMemoryUnmappedSinceRegistered: nothing is pinned, so a program may unmap memory
// it registered; an RDMA WRITE into it then fails as one into an unmapped on-demand page: NAK
// 0x62, REM_ACCESS_ERR for the writer, and nothing written anywhere.
func TestWriteIntoMemoryUnmappedSinceRegistered(t *testing.T) {
	a, b := toUnmapped(t)
	a.postWrite(b.mrKey, 9)
	cqe := waitCQE(t, a.cqr)
	if binary.LittleEndian.Uint64(cqe) != 9 || u32(cqe, 8) != 10 {
		t.Fatalf("CQE wr_id %d status %d, want 9 and REM_ACCESS_ERR (10)", binary.LittleEndian.Uint64(cqe), u32(cqe, 8))
	}
}

// An atomic on memory the program unmapped since it registered it fails before it writes
// anything, as a WRITE does: NAK 0x62, REM_ACCESS_ERR for the requester.
func TestAtomicOnMemoryUnmappedSinceRegistered(t *testing.T) {
	a, b := toUnmapped(t)
	a.postWQE(11, 6, 104, 8, func(wqe []byte) { // IBV_WR_ATOMIC_FETCH_AND_ADD
		binary.LittleEndian.PutUint64(wqe[24:], 0x10000+4000)
		binary.LittleEndian.PutUint64(wqe[32:], 5) // add
		binary.LittleEndian.PutUint32(wqe[48:], b.mrKey)
	})
	cqe := waitCQE(t, a.cqr)
	if binary.LittleEndian.Uint64(cqe) != 11 || u32(cqe, 8) != 10 {
		t.Fatalf("CQE wr_id %d status %d, want 11 and REM_ACCESS_ERR (10)", binary.LittleEndian.Uint64(cqe), u32(cqe, 8))
	}
}

// pinnedMem is a program's memory that keeps a count of pinned pages against a limit, as the
// daemon's does under run -memlock.
type pinnedMem struct {
	*progMem
	limit, pinned uint64
}

func (m *pinnedMem) Pin(pages uint64) error {
	if m.pinned+pages > m.limit {
		return fmt.Errorf("over the limit: %w", syscall.ENOMEM)
	}
	m.pinned += pages
	return nil
}

func (m *pinnedMem) Unpin(pages uint64) { m.pinned -= pages }

// Where the program's memory counts pinned pages, REG_MR counts the pages its range touches,
// as ib_umem_get does (a byte on each side of a page boundary is two), refuses with ENOMEM past
// the limit, and DEREG_MR and the context's end give the pages back.
func TestRegMRCountsPinnedPages(t *testing.T) {
	d := testDevice(t)
	p := newProgram(t, d)
	mem := &pinnedMem{progMem: p.mem, limit: 4}
	c, f, err := New(d, mem, t.Name(), 1)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	p.c = c
	p.open()
	resp, _ := p.run(legacy(uverbs.CmdAllocPD, words(uint64(respAddr)), 4), nil)
	pdh := u32(resp, 0)
	reg := func(start, length uint64) []byte {
		return legacy(uverbs.CmdRegMR, words(uint64(respAddr), start, length, start, pdh, uint32(1)), 12)
	}
	resp, _ = p.run(reg(0x10fff, 2), nil)
	straddling := u32(resp, 0)
	if mem.pinned != 2 {
		t.Fatalf("2 bytes across a page boundary pinned %d pages, want 2", mem.pinned)
	}
	p.refused("REG_MR of 3 more pages past a limit of 4", reg(0x20000, 3*4096), syscall.ENOMEM)
	if mem.pinned != 2 {
		t.Fatalf("a refused REG_MR left %d pages pinned, want 2", mem.pinned)
	}
	p.run(reg(0x20000, 2*4096), nil)
	if mem.pinned != 4 {
		t.Fatalf("%d pages pinned, want 4", mem.pinned)
	}
	p.run(legacy(uverbs.CmdDeregMR, words(straddling), 0), nil)
	if mem.pinned != 2 {
		t.Fatalf("DEREG_MR left %d pages pinned, want 2", mem.pinned)
	}
	c.Close()
	if mem.pinned != 0 {
		t.Fatalf("the context's end left %d pages pinned", mem.pinned)
	}
}

// MODIFY_SRQ with IBV_SRQ_MAX_WR resizes the SRQ as rxe_queue_resize does: the new queue's
// mapping is written through the mmap_info address rxe's provider passes, the receives posted
// and not yet taken move to its first slots, and QUERY_SRQ reports the new size. A size too
// small for them, or under the limit, is EINVAL, and the SRQ is as it was.
func TestResizeSRQ(t *testing.T) {
	p := newProgram(t, testDevice(t))
	p.open()
	resp, _ := p.run(legacy(uverbs.CmdAllocPD, words(uint64(respAddr)), 4), nil)
	pdh := u32(resp, 0)
	resp, _ = p.run(legacy(uverbs.CmdCreateSRQ, words(uint64(respAddr), uint64(0x5e), pdh, uint32(7), uint32(1), uint32(0)), 16+24), nil)
	srqh := u32(resp, 0)
	if u32(resp, 4) != 7 {
		t.Fatalf("SRQ of 7 WRs has %d", u32(resp, 4))
	}
	old := p.ring(resp[16:32])
	logElem := u32(old, 0)
	for i := range uint32(7) {
		binary.LittleEndian.PutUint64(old[384+int(i)<<logElem:], 0x100+uint64(i)) // wr_id
	}
	binary.LittleEndian.PutUint32(old[128:], 7) // producer: the queue is full
	const mi = 0x10000 + 512
	modify := func(maxWR, limit, mask uint32) []byte {
		return legacy(uverbs.CmdModifySRQ, words(srqh, mask, maxWR, limit, uint64(mi)), 0)
	}
	p.refused("a resize to 3 WRs with 7 posted", modify(3, 0, 1), syscall.EINVAL)
	p.refused("a resize to 3 WRs under a limit of 5", modify(3, 5, 3), syscall.EINVAL)
	_, r := p.run(modify(60, 0, 1), nil)
	var info []byte
	for _, w := range r.Writes {
		if w.Addr == mi {
			info = w.Data
		}
	}
	if len(info) != 16 {
		t.Fatalf("no mmap info written at 0x%x: %+v", mi, r.Writes)
	}
	nr := p.ring(info)
	if u32(nr, 128) != 7 || u32(nr, 192) != 0 {
		t.Fatalf("new queue: producer %d consumer %d, want 7 and 0", u32(nr, 128), u32(nr, 192))
	}
	for i := range 7 {
		if id := binary.LittleEndian.Uint64(nr[384+i<<logElem:]); id != 0x100+uint64(i) {
			t.Fatalf("slot %d holds wr_id 0x%x, want 0x%x", i, id, 0x100+i)
		}
	}
	resp, _ = p.run(legacy(uverbs.CmdQuerySRQ, words(uint64(respAddr), srqh, uint32(0)), 16), nil)
	if u32(resp, 0) != 63 {
		t.Fatalf("QUERY_SRQ: max_wr %d, want 63", u32(resp, 0))
	}
}

// TestResizeCQCountsPostedSends: RESIZE_CQ counts the completions of the UD sends posted before
// it, as a NIC that wrote them before the command came would, though the device's clock (a
// simulator's, never run here) has not sent them: six unpolled sends refuse a CQ of one entry
// with EINVAL (rdma-core's test_resize_cq), and fit in one of seven, where all six are.
func TestResizeCQCountsPostedSends(t *testing.T) {
	d := testDeviceOn(t, sim.NewSim())
	a := postedUDSends(t, d)
	resize := func(cqe uint32) []byte {
		return legacy(uverbs.CmdResizeCQ, words(uint64(respAddr), a.cqh, cqe), 8+16)
	}
	a.p.refused("shrinking to one entry under six unpolled sends", resize(1), syscall.EINVAL)
	resp, _ := a.p.run(resize(7), nil)
	wantPostedSends(t, "carried over", a.p.ring(resp[8:]), a.qpn)
}

// TestDestroyQPSendsPostedDatagrams: DESTROY_QP lets the UD sends posted before it go, though
// the device's clock (a simulator's, not run until after) had not come to them, as rxe, which
// sends within the post, has: their six completions are in the CQ when the command returns,
// and their frames leave once the clock runs. libfabric's rxd destroys its QP right after
// posting the ACK of its peer's last message; a peer that never sees it resends for minutes.
func TestDestroyQPSendsPostedDatagrams(t *testing.T) {
	s := sim.NewSim()
	d := testDeviceOn(t, s)
	a := postedUDSends(t, d)
	a.p.run(legacy(uverbs.CmdDestroyQP, words(uint64(respAddr), a.qph, uint32(0)), 4), nil)
	wantPostedSends(t, "after DESTROY_QP", a.cqr, a.qpn)
	s.RunUntilIdle(0)
	if st := d.Engine.Stats(); st.TxFrames != 6 {
		t.Fatalf("%d frames sent, want the 6 datagrams", st.TxFrames)
	}
}

// postedUDSends is a program on d with a UD QP in RTS that has six signalled 8-byte SENDs to
// itself posted and its doorbell rung.
func postedUDSends(t *testing.T, d *Device) *rcEnd {
	a := newEndOf(t, d, nil, 4)
	const qkey = 0x11111111
	mod := a.modify
	mod(1|1<<4|1<<5|1<<6, func(b []byte) { b[mqState], b[mqPort] = 1, 1; binary.LittleEndian.PutUint32(b[mqQKey:], qkey) })
	mod(1, func(b []byte) { b[mqState] = 2 })
	mod(1|1<<16, func(b []byte) { b[mqState] = 3 })
	for id := uint64(1); id <= 6; id++ {
		a.postWQE(id, 2, 100, 8, func(wqe []byte) { // IBV_WR_SEND to itself through the rxe_av in the WQE
			binary.LittleEndian.PutUint32(wqe[abi.SendRemoteQPN:], a.qpn)
			binary.LittleEndian.PutUint32(wqe[abi.SendRemoteQKey:], qkey)
			av := wqe[abi.SendAV:]
			g := netip.MustParseAddr("::ffff:127.0.0.1").As16()
			copy(av[abi.RXEAVDGID:], g[:])
			av[abi.RXEAVHopLimit], av[abi.RXEAVNetworkType] = 64, 1
		})
	}
	return a
}

// wantPostedSends asserts that the CQ ring cq holds exactly the successful completions of
// postedUDSends' six SENDs by QP qpn, in order; when names the moment.
func wantPostedSends(t *testing.T, when string, cq []byte, qpn uint32) {
	t.Helper()
	if prod := u32(cq, 128); prod != 6 {
		t.Fatalf("%d CQEs %s, want the 6 sends'", prod, when)
	}
	for i := range 6 {
		cqe := cq[384+i<<u32(cq, 0):]
		if id := binary.LittleEndian.Uint64(cqe); id != uint64(i+1) || u32(cqe, 8) != 0 || u32(cqe, 12) != 0 || u32(cqe, 28) != qpn {
			t.Fatalf("CQE %d %s: wr_id %d status %d opcode %d qp 0x%x; want %d, 0 (success), 0 (SEND), 0x%x", i, when, id, u32(cqe, 8), u32(cqe, 12), u32(cqe, 28), i+1, qpn)
		}
	}
}
