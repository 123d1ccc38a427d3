package vfiouser

import (
	"fmt"

	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/abi"
)

// Function serves a softirdma PCI function (hw.Function): its BARs and config space as the
// regions QEMU's vfio-user-pci expects, its MSI-X vectors as the interrupts of index 2.
type Function struct {
	F *hw.Function
}

// NewFunction makes the function of cfg and the server that serves it on cfg.SocketPath: the
// function's interrupts are the server's MSI-X eventfds.
func NewFunction(scfg Config, fcfg hw.Config) (*Server, *hw.Function, error) {
	var srv *Server
	fcfg.IRQ = func(vector int) {
		if srv != nil {
			srv.Trigger(PCIMSIXIRQ, uint32(vector))
		}
	}
	f := hw.New(fcfg)
	s, err := New(scfg, Function{F: f})
	if err != nil {
		return nil, nil, err
	}
	srv = s
	return s, f, nil
}

// Describe offers BARs 0, 2 and 4 and the 4 KiB config space, and 16 MSI-X vectors; no INTx
// or MSI (the config space has no INTx pin and no MSI capability).
func (d Function) Describe() Description {
	rw := uint32(RegionFlagRead | RegionFlagWrite)
	regions := make([]Region, PCINumRegions)
	regions[abi.BARRegs] = Region{Size: abi.BARRegsSize, Flags: rw}
	regions[abi.BARDoorbell] = Region{Size: abi.BARDoorbells, Flags: rw}
	regions[abi.MSIXBar] = Region{Size: abi.MSIXBarSize, Flags: rw}
	regions[PCIConfigRegion] = Region{Size: 4096, Flags: rw}
	irqs := make([]IRQ, PCINumIRQs)
	irqs[PCIMSIXIRQ] = IRQ{Count: abi.NumVectors, Flags: IRQEventfd | IRQNoResize}
	return Description{Flags: DeviceFlagPCI | DeviceFlagReset, Regions: regions, IRQs: irqs}
}

// RegionRead reads a BAR or the config space.
func (d Function) RegionRead(index uint32, off uint64, data []byte) error {
	switch index {
	case abi.BARRegs, abi.BARDoorbell, abi.MSIXBar:
		return d.F.RegionRead(int(index), off, data)
	case PCIConfigRegion:
		return d.F.ConfigRead(off, data)
	}
	return fmt.Errorf("region %d is not the function's", index)
}

// RegionWrite writes a BAR or the config space.
func (d Function) RegionWrite(index uint32, off uint64, data []byte) error {
	switch index {
	case abi.BARRegs, abi.BARDoorbell, abi.MSIXBar:
		return d.F.RegionWrite(int(index), off, data)
	case PCIConfigRegion:
		return d.F.ConfigWrite(off, data)
	}
	return fmt.Errorf("region %d is not the function's", index)
}

// Reset is the function's reset.
func (d Function) Reset() error {
	d.F.Reset()
	return nil
}

// MapDMA gives the function memory it can reach. Memory the server could not map is not given:
// the function reaches only what it can touch. Read-only memory (ROM) is not given either: the
// function writes where the guest tells it to.
func (d Function) MapDMA(iova, size uint64, mem []byte, writable bool) {
	if mem == nil || !writable {
		return
	}
	_ = d.F.MapDMA(iova, mem)
}

// UnmapDMA revokes everything of the function over the range before it goes.
func (d Function) UnmapDMA(iova, size uint64) {
	_ = d.F.UnmapDMA(iova, size)
}
