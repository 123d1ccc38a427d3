package driver_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/driver"
)

// funcBus is the smallest Bus: the function in the same process, its BARs called directly and
// guest memory a slice it was given. The function's engine runs on a simulator: every read of
// guest memory (a driver polling a ring) first runs what is due, so nothing waits on a real clock.
type funcBus struct {
	fn   *hw.Function
	sim  *emu.Sim
	ram  []byte
	base uint64
}

func (b *funcBus) ReadReg(bar int, off uint32) (uint32, error) {
	var p [4]byte
	err := b.fn.RegionRead(bar, uint64(off), p[:])
	return binary.LittleEndian.Uint32(p[:]), err
}

func (b *funcBus) WriteReg(bar int, off uint32, v uint32) error {
	return b.fn.RegionWrite(bar, uint64(off), binary.LittleEndian.AppendUint32(nil, v))
}

func (b *funcBus) ReadMem(addr uint64, p []byte) error {
	b.sim.RunUntilIdle(0)
	copy(p, b.ram[addr-b.base:])
	return nil
}

func (b *funcBus) WriteMem(addr uint64, p []byte) error {
	copy(b.ram[addr-b.base:], p)
	return nil
}

// The Go driver brings the function up as a guest driver would (control queue, PD, MR, CQ,
// QPs through the rings in guest memory) and sends an RDMA WRITE from one of its QPs to
// another: the function has no link, so it reaches only itself.
func Example() {
	const base = 0x100000
	sim := emu.NewSim()
	fn := hw.New(hw.Config{Name: "fn", Clock: sim, IP: netip.MustParseAddr("192.0.2.1")})
	bus := &funcBus{fn: fn, sim: sim, ram: make([]byte, 1<<20), base: base}
	check(fn.MapDMA(base, bus.ram))
	check(fn.ConfigWrite(4, []byte{6})) // PCI command: memory decoding and bus mastering

	d := get(driver.Open(bus, driver.Arena{Base: base, Size: 1 << 20}))
	pd := get(d.AllocPD())
	mr := get(d.RegMR(pd, 4096, 1|2)) // LOCAL_WRITE | REMOTE_WRITE
	cq := get(d.CreateCQ(4, nil))
	caps := driver.QPCaps{SendLog: 4, RecvLog: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	q1, q2 := get(d.CreateQP(pd, cq, cq, caps)), get(d.CreateQP(pd, cq, cq, caps))
	rts(q1, q2.Num)
	rts(q2, q1.Num)

	check(bus.WriteMem(mr.Addr, []byte("through the rings")))
	check(q1.PostSend(driver.SendWR{ID: 7, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled,
		SGL: []driver.SGE{{Addr: mr.Addr, Length: 17, Key: mr.Key}}, RemoteAddr: mr.Addr + 2048, RKey: mr.Key}))
	wcs := get(cq.Poll(4))
	got := make([]byte, 17)
	check(d.ReadMem(mr.Addr+2048, got))
	fmt.Printf("%d completion: id %d status %d byte_len %d; %q\n", len(wcs), wcs[0].WRID, wcs[0].Status, wcs[0].ByteLen, got)
	// Output: 1 completion: id 7 status 0 byte_len 17; "through the rings"
}

// rts takes q through INIT and RTR to RTS towards the QP numbered peer on the same function,
// with ibv_modify_qp's attributes and masks.
func rts(q *driver.QP, peer uint32) {
	const (
		state, access, pkey, port, av, mtu, timeout, retry = 1, 8, 16, 32, 128, 256, 512, 1024
		rnrRetry, rqPSN, rdAtomic, minRNR, sqPSN, destRd   = 2048, 4096, 8192, 32768, 65536, 131072
		destQPN                                            = 1 << 20
	)
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1} // 192.0.2.1, IPv4-mapped
	check(q.Modify(driver.QPAttr{State: 1, PortNum: 1, AccessFlags: 2}, state|access|pkey|port))
	check(q.Modify(driver.QPAttr{State: 2, PathMTU: 3, DestQPN: peer, MaxDestRdAtomic: 1, MinRNRTimer: 12, HopLimit: 64, DGID: gid},
		state|av|mtu|destQPN|rqPSN|destRd|minRNR))
	check(q.Modify(driver.QPAttr{State: 3, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		state|sqPSN|timeout|retry|rnrRetry|rdAtomic))
}

// get and check stop an example at the first error: the calls they wrap fail only on a bug.
func get[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
