package hw

import (
	"encoding/binary"
	"math"
	"syscall"

	"github.com/softirdma/softirdma/hw/abi"
)

// configSize is the config space: 4 KiB, PCI Express's (256 bytes would make QEMU treat the
// function as plain PCI).
const configSize = 4096

// Where the capabilities sit in config space.
const (
	capMSIX = 0x40
	capPCIe = 0x50

	pciCommand   = 0x04
	msixControl  = capMSIX + 2
	cmdMemory    = 1 << 1
	cmdBusMaster = 1 << 2
)

// buildConfigSpace writes the power-on config space: the type 0 header, an MSI-X capability
// with its table and PBA in BAR 4, and a PCI Express endpoint capability. QEMU emulates the
// BARs, the MSI-X table and the enable bits itself; what reaches the function are reads of the
// whole space and writes it mostly keeps as they are.
func (f *Function) buildConfigSpace() {
	c := f.config[:]
	clear(c)
	le16 := binary.LittleEndian.PutUint16
	le32 := binary.LittleEndian.PutUint32
	le16(c[0x00:], abi.PCIVendorID)
	le16(c[0x02:], abi.PCIDeviceID)
	le16(c[0x06:], 1<<4) // status: capabilities list
	c[0x08] = abi.PCIRevision
	c[0x09] = byte(abi.PCIClassCode & 0xff)
	c[0x0a] = byte(abi.PCIClassCode >> 8 & 0xff)
	c[0x0b] = byte(abi.PCIClassCode >> 16)
	// BARs 0, 2 and 4: 32-bit memory, not prefetchable (type bits all zero).
	le16(c[0x2c:], abi.PCISubsystemVendorID)
	le16(c[0x2e:], abi.PCISubsystemID)
	c[0x34] = capMSIX
	c[0x3d] = 0 // no INTx: MSI-X only

	c[capMSIX] = 0x11 // MSI-X
	c[capMSIX+1] = capPCIe
	le16(c[capMSIX+2:], abi.NumVectors-1)
	le32(c[capMSIX+4:], abi.MSIXTableOffset|abi.MSIXBar)
	le32(c[capMSIX+8:], abi.PBAOffset|abi.MSIXBar)

	c[capPCIe] = 0x10 // PCI Express
	c[capPCIe+1] = 0
	le16(c[capPCIe+2:], 2) // capability version 2, device/port type 0: endpoint
}

// configWritable says which config-space bytes a write changes: the command register, the
// MSI-X enable and function-mask bits, the interrupt line, and the PCIe device control. The
// rest is read-only (QEMU emulates the BARs itself).
func configWritable(off int) byte {
	switch {
	case off == pciCommand:
		return 0xff
	case off == pciCommand+1:
		return 0x07
	case off == 0x3c:
		return 0xff
	case off == msixControl+1:
		return 0xc0
	case off == capPCIe+8 || off == capPCIe+9:
		return 0xff
	}
	return 0
}

// ConfigRead reads config space.
func (f *Function) ConfigRead(off uint64, p []byte) error {
	if off >= configSize || uint64(len(p)) > configSize-off {
		return errf(syscall.EINVAL, "config read [0x%x, +%d) outside %d bytes", off, len(p), configSize)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	copy(p, f.config[off:])
	return nil
}

// ConfigWrite writes config space, keeping the read-only bits.
func (f *Function) ConfigWrite(off uint64, p []byte) error {
	if off >= configSize || uint64(len(p)) > configSize-off {
		return errf(syscall.EINVAL, "config write [0x%x, +%d) outside %d bytes", off, len(p), configSize)
	}
	f.mu.Lock()
	master := f.busMasterLocked()
	for i, v := range p {
		o := int(off) + i
		m := configWritable(o)
		f.config[o] = f.config[o]&^m | v&m
	}
	// A function may not reach memory without bus mastering. Taking it away from a running
	// function stops it for good (FATAL, until a reset), with every MR and queue revoked so
	// that nothing the engine does later touches guest memory.
	stop := master && !f.busMasterLocked() && f.dev != nil && f.regs.status&abi.DevStatusFatal == 0
	if stop {
		f.fatalLocked(abi.FatalBusMaster)
	}
	f.mu.Unlock()
	if stop {
		f.revoke(0, math.MaxUint64, "bus mastering was turned off")
	}
	return nil
}

// busMaster says whether the driver let the function reach memory (the command register's
// bus-master bit). f.mu is held.
func (f *Function) busMasterLocked() bool { return f.config[pciCommand]&cmdBusMaster != 0 }
