package vfioserve

import (
	"context"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/fdtest"
)

// The softirdma function behind the server, driven through the same messages QEMU sends: its
// identity in config space, guest RAM from a memfd, a control command run through BAR 0 whose
// completion arrives as MSI-X vector 0 on its eventfd, and the function's engine gone at reset.
func TestFunctionOverVfioUser(t *testing.T) {
	srv, f, err := New(vfiouser.Config{}, hw.Config{Name: "fn", Clock: emu.NewSim()})
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, srv)
	if _, err := c.Version(); err != nil {
		t.Fatal(err)
	}
	info, err := c.GetDeviceInfo()
	if err != nil || info.NumRegions != vfiouser.PCINumRegions || info.NumIRQs != vfiouser.PCINumIRQs || info.Flags != vfiouser.DeviceFlagPCI|vfiouser.DeviceFlagReset {
		t.Fatalf("device info %+v %v", info, err)
	}
	for bar, size := range map[uint32]uint64{0: abi.BARRegsSize, 1: 0, 2: abi.BARDoorbells, 4: abi.MSIXBarSize, 7: 4096} {
		ri, err := c.GetRegionInfo(bar)
		if err != nil || ri.Size != size {
			t.Fatalf("region %d: %+v %v", bar, ri, err)
		}
	}
	if irq, err := c.GetIRQInfo(vfiouser.PCIMSIXIRQ); err != nil || irq.Count != abi.NumVectors {
		t.Fatalf("MSI-X info %+v %v", irq, err)
	}
	id := make([]byte, 4)
	must(t, c.RegionRead(vfiouser.PCIConfigRegion, 0, id))
	if binary.LittleEndian.Uint32(id) != abi.PCIDeviceID<<16|abi.PCIVendorID {
		t.Fatalf("IDs % x", id)
	}

	const ramAt, ramSize = 0x100000, 1 << 20
	fd := memfd(t, ramSize)
	defer unix.Close(fd)
	ram, err := unix.Mmap(fd, 0, ramSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(ram)
	must(t, c.DMAMap(ramAt, ramSize, fd, 0, 3))
	efd := eventfd(t)
	defer unix.Close(efd)
	must(t, c.SetIRQEventfds(vfiouser.PCIMSIXIRQ, 0, []int{efd}))

	reg := func(off uint32, v uint32) {
		t.Helper()
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], v)
		must(t, c.RegionWrite(abi.BARRegs, uint64(off), b[:], true))
	}
	read := func(off uint32) uint32 {
		t.Helper()
		var b [4]byte
		must(t, c.RegionRead(abi.BARRegs, uint64(off), b[:]))
		return binary.LittleEndian.Uint32(b[:])
	}
	must(t, c.RegionWrite(vfiouser.PCIConfigRegion, 4, []byte{6}, false)) // memory space and bus mastering
	reg(abi.RegCtrlQBaseL, ramAt)
	reg(abi.RegCtrlQLog, 2)
	reg(abi.RegDevCtrl, abi.DevCtrlEnable)
	binary.LittleEndian.PutUint16(ram[abi.CtrlOpcode:], abi.OpAllocPD)
	reg(abi.RegCtrlQProd, 1)
	if cons := read(abi.RegCtrlQCons); cons != 1 {
		t.Fatalf("consumer %d", cons)
	}
	if st := binary.LittleEndian.Uint32(ram[abi.CtrlStatus:]); st != abi.CtrlDone || binary.LittleEndian.Uint32(ram[abi.CtrlResult:]) != 1 {
		t.Fatalf("status 0x%x, PD %d", st, binary.LittleEndian.Uint32(ram[abi.CtrlResult:]))
	}
	if n := readEventfd(t, efd); n != 1 {
		t.Fatalf("vector 0 signalled %d times", n)
	}
	if f.Device() == nil {
		t.Fatal("no engine after enable")
	}
	must(t, c.Reset())
	if f.Device() != nil || read(abi.RegDevStatus) != 0 {
		t.Fatal("the function survived DEVICE_RESET")
	}
	must(t, c.DMAUnmap(ramAt, ramSize, false))
}

// serve serves srv on one end of a socketpair until the test ends and returns a client on the
// other.
func serve(t testing.TB, srv *vfiouser.Server) *vfiouser.Client {
	a, b, err := vfiouser.Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(context.Background(), a) }()
	c := vfiouser.NewClient(b)
	t.Cleanup(func() { c.Close(); <-done })
	return c
}

func memfd(t testing.TB, size int) int { return fdtest.Memfd(t, size, nil) }

var (
	eventfd     = fdtest.Eventfd
	readEventfd = fdtest.ReadEventfd
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
