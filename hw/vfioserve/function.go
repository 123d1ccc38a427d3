// Package vfioserve is where softirdma's PCI function (hw) meets the vfio-user transport
// (hw/vfiouser). It owns the one mapping between them: which of the function's BARs and config
// space are which vfio-user regions, that its MSI-X vectors are the interrupts of index 2, and
// how the function's interrupts reach the server's eventfds. hw/vfiouser knows no device and hw
// knows no transport, so both stay testable alone and imports point one way:
// cmd -> hw/vfioserve -> hw/vfiouser, hw.
package vfioserve

import (
	"fmt"
	"sync/atomic"

	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/vfiouser"
)

// function is the vfiouser.Device a softirdma function is served as. Only New makes one: the
// interrupt wiring is part of it.
type function struct {
	f *hw.Function
	// srv is where the function's interrupts go. The function exists before the server that
	// serves it (the server asks it to Describe itself), so the adapter, which exists before
	// both, holds the server once there is one: the function's IRQ callback is a method of the
	// adapter, not a closure over a variable filled in after the function was made, and the
	// atomic makes the hand-over safe whichever goroutine raises the interrupt.
	srv atomic.Pointer[vfiouser.Server]
}

// New makes the function of fcfg and the server that serves it on scfg.SocketPath, the
// function's interrupts going to the server's MSI-X eventfds; fcfg.IRQ is replaced to that end.
func New(scfg vfiouser.Config, fcfg hw.Config) (*vfiouser.Server, *hw.Function, error) {
	d := &function{}
	fcfg.IRQ = d.interrupt
	d.f = hw.New(fcfg)
	srv, err := vfiouser.New(scfg, d)
	if err != nil {
		return nil, nil, err
	}
	d.srv.Store(srv)
	return srv, d.f, nil
}

// interrupt raises an MSI-X vector. One raised before the server exists is dropped: no client
// can have assigned its eventfd yet, so there is nobody it could reach.
func (d *function) interrupt(vector int) {
	if srv := d.srv.Load(); srv != nil {
		srv.Trigger(vfiouser.PCIMSIXIRQ, uint32(vector))
	}
}

// Describe offers BARs 0, 2 and 4 and the 4 KiB config space, and 16 MSI-X vectors; no INTx
// or MSI (the config space has no INTx pin and no MSI capability).
func (d *function) Describe() vfiouser.Description {
	rw := uint32(vfiouser.RegionFlagRead | vfiouser.RegionFlagWrite)
	regions := make([]vfiouser.Region, vfiouser.PCINumRegions)
	regions[abi.BARRegs] = vfiouser.Region{Size: abi.BARRegsSize, Flags: rw}
	regions[abi.BARDoorbell] = vfiouser.Region{Size: abi.BARDoorbells, Flags: rw}
	regions[abi.MSIXBar] = vfiouser.Region{Size: abi.MSIXBarSize, Flags: rw}
	regions[vfiouser.PCIConfigRegion] = vfiouser.Region{Size: 4096, Flags: rw}
	irqs := make([]vfiouser.IRQ, vfiouser.PCINumIRQs)
	irqs[vfiouser.PCIMSIXIRQ] = vfiouser.IRQ{Count: abi.NumVectors, Flags: vfiouser.IRQEventfd | vfiouser.IRQNoResize}
	return vfiouser.Description{
		Flags:   vfiouser.DeviceFlagPCI | vfiouser.DeviceFlagReset,
		Regions: regions,
		IRQs:    irqs,
	}
}

// RegionRead reads a BAR or the config space.
func (d *function) RegionRead(index uint32, off uint64, data []byte) error {
	return regionAccess(index, off, data, d.f.RegionRead, d.f.ConfigRead)
}

// RegionWrite writes a BAR or the config space.
func (d *function) RegionWrite(index uint32, off uint64, data []byte) error {
	return regionAccess(index, off, data, d.f.RegionWrite, d.f.ConfigWrite)
}

// regionAccess sends an access to region index to the function's BAR access or its config
// space access; any other region is not the function's.
func regionAccess(index uint32, off uint64, data []byte, bar func(int, uint64, []byte) error, config func(uint64, []byte) error) error {
	switch index {
	case abi.BARRegs, abi.BARDoorbell, abi.MSIXBar:
		return bar(int(index), off, data)
	case vfiouser.PCIConfigRegion:
		return config(off, data)
	}
	return fmt.Errorf("region %d is not the function's", index)
}

// Reset is the function's reset.
func (d *function) Reset() error {
	d.f.Reset()
	return nil
}

// MapDMA gives the function memory it can reach. Memory the server could not map is not given:
// the function reaches only what it can touch. Read-only memory (ROM) is not given either: the
// function writes where the guest tells it to.
func (d *function) MapDMA(iova, size uint64, mem []byte, writable bool) {
	if mem == nil || !writable {
		return
	}
	_ = d.f.MapDMA(iova, mem)
}

// UnmapDMA revokes everything of the function over the range before it goes.
func (d *function) UnmapDMA(iova, size uint64) {
	_ = d.f.UnmapDMA(iova, size)
}
