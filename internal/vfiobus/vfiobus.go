// Package vfiobus is a guest for tests: a vfio-user client of softirdma's function with guest
// RAM in a memfd that it maps and hands the server, bus mastering on, read and written as
// hw/driver's Bus, the way QEMU and a guest kernel do.
package vfiobus

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/softirdma/softirdma/hw/vfiouser"
	"golang.org/x/sys/unix"
)

// Bus is the client, the guest RAM and where it starts in guest physical memory.
type Bus struct {
	C    *vfiouser.Client
	RAM  []byte
	Base uint64
	// Step, if set, runs before each read of guest memory: a test on a simulator's clock runs
	// what is due, so a driver polling a ring sees the function's progress.
	Step func()
}

// Attach negotiates the version with the server c talks to, gives it size bytes of guest RAM
// at base (a memfd, mapped here too) and turns bus mastering on. The memory goes when the test
// ends.
func Attach(t testing.TB, c *vfiouser.Client, base, size uint64) *Bus {
	t.Helper()
	if _, err := c.Version(); err != nil {
		t.Fatal(err)
	}
	mfd, err := unix.MemfdCreate("guest", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(mfd) })
	if err := unix.Ftruncate(mfd, int64(size)); err != nil {
		t.Fatal(err)
	}
	ram, err := unix.Mmap(mfd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(ram) })
	if err := c.DMAMap(base, size, mfd, 0, 3); err != nil {
		t.Fatal(err)
	}
	// PCI command register: memory space and bus master.
	if err := c.RegionWrite(vfiouser.PCIConfigRegion, 4, []byte{6}, false); err != nil {
		t.Fatal(err)
	}
	return &Bus{C: c, RAM: ram, Base: base}
}

func (b *Bus) ReadReg(bar int, off uint32) (uint32, error) {
	var p [4]byte
	err := b.C.RegionRead(uint32(bar), uint64(off), p[:])
	return binary.LittleEndian.Uint32(p[:]), err
}

func (b *Bus) WriteReg(bar int, off uint32, v uint32) error {
	var p [4]byte
	binary.LittleEndian.PutUint32(p[:], v)
	return b.C.RegionWrite(uint32(bar), uint64(off), p[:], false)
}

func (b *Bus) mem(addr uint64, n int) ([]byte, error) {
	if addr < b.Base || addr-b.Base > uint64(len(b.RAM)) || uint64(n) > uint64(len(b.RAM))-(addr-b.Base) {
		return nil, fmt.Errorf("[0x%x, +%d) is not guest RAM", addr, n)
	}
	return b.RAM[addr-b.Base : addr-b.Base+uint64(n)], nil
}

func (b *Bus) ReadMem(addr uint64, p []byte) error {
	if b.Step != nil {
		b.Step()
	}
	m, err := b.mem(addr, len(p))
	if err == nil {
		copy(p, m)
	}
	return err
}

func (b *Bus) WriteMem(addr uint64, p []byte) error {
	m, err := b.mem(addr, len(p))
	if err == nil {
		copy(m, p)
	}
	return err
}
