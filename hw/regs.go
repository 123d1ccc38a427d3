package hw

import (
	"encoding/binary"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
)

// RegionRead reads a BAR. Registers are read 32 bits at a time, aligned; other accesses read
// as zeros, as a real device's undecoded bytes would. BAR 4's PBA reads as no vector pending.
func (f *Function) RegionRead(bar int, off uint64, p []byte) error {
	size, ok := barSizes[bar]
	if !ok || off >= size || uint64(len(p)) > size-off {
		return errf(syscall.EINVAL, "read of BAR %d [0x%x, +%d)", bar, off, len(p))
	}
	clear(p)
	if bar != abi.BARRegs || len(p) != 4 || off%4 != 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	binary.LittleEndian.PutUint32(p, f.readRegLocked(uint32(off)))
	return nil
}

// RegionWrite writes a BAR: registers and doorbells 32 bits at a time, aligned; other writes
// are dropped.
func (f *Function) RegionWrite(bar int, off uint64, p []byte) error {
	size, ok := barSizes[bar]
	if !ok || off >= size || uint64(len(p)) > size-off {
		return errf(syscall.EINVAL, "write of BAR %d [0x%x, +%d)", bar, off, len(p))
	}
	if len(p) != 4 || off%4 != 0 || bar == abi.MSIXBar {
		return nil
	}
	v := binary.LittleEndian.Uint32(p)
	if bar == abi.BARDoorbell {
		f.doorbell(off, v)
		return nil
	}
	f.mu.Lock()
	var irq []int
	if bar == abi.BARRegs {
		irq = f.writeRegLocked(uint32(off), v)
	}
	f.mu.Unlock()
	for _, vec := range irq {
		f.signal(vec)
	}
	return nil
}

var barSizes = map[int]uint64{abi.BARRegs: abi.BARRegsSize, abi.BARDoorbell: abi.BARDoorbells, abi.MSIXBar: abi.MSIXBarSize}

func (f *Function) signal(vector int) {
	if f.cfg.IRQ != nil {
		f.cfg.IRQ(vector)
	}
}

// caps are the capabilities the function offers.
const caps = abi.CapMWType1 | abi.CapMWType2A | abi.CapMWType2B | abi.CapAtomics | abi.CapSRQ | abi.CapFlush |
	abi.CapAtomicWrite | abi.CapFastReg | abi.CapZeroBased | abi.CapCQModeration | abi.CapOnDemand | abi.CapEthernet | abi.CapUD

func (f *Function) readRegLocked(off uint32) uint32 {
	switch {
	case off >= abi.RegGIDTable && off < abi.RegGIDTable+16*abi.GIDTableLen:
		i := (off - abi.RegGIDTable) / 16
		return binary.LittleEndian.Uint32(f.regs.gids[i][(off-abi.RegGIDTable)%16:])
	case off <= abi.RegCtrlQMax:
		return f.describingReg(off)
	}
	return f.stateRegLocked(off)
}

// describingReg reads the registers that describe the function, from RegMagic to RegCtrlQMax:
// its identity, capabilities and limits, which no driver changes.
func (f *Function) describingReg(off uint32) uint32 {
	if off%4 != 0 {
		return 0
	}
	l := engine.DefaultLimits
	regs := [abi.RegCtrlQMax/4 + 1]uint32{
		abi.RegMagic / 4: abi.MagicValue, abi.RegVersion / 4: abi.Version, abi.RegCaps / 4: caps, abi.RegPageSizes / 4: pageSizes,
		abi.RegMaxQP / 4: abi.MaxQPSlots, abi.RegMaxQPWR / 4: ringable(l.MaxQPWR, l.MaxQPWR+1),
		abi.RegMaxSGE / 4: uint32(l.MaxSGE), abi.RegMaxInline / 4: uint32(l.MaxInline),
		abi.RegMaxCQ / 4: abi.MaxCQSlots, abi.RegMaxCQE / 4: ringable(l.MaxCQE, 1<<abi.CQMaxLog),
		abi.RegMaxSRQ / 4: uint32(l.MaxSRQ), abi.RegMaxSRQWR / 4: ringable(l.MaxSRQWR, l.MaxSRQWR+1),
		abi.RegMaxMR / 4: uint32(f.maxSTags(false)), abi.RegMaxMW / 4: uint32(f.maxSTags(true)),
		abi.RegMaxPD / 4: uint32(l.MaxPD), abi.RegMaxRdAtom / 4: uint32(l.MaxQPRdAtom), abi.RegMaxMsgSize / 4: uint32(l.MaxMsgSize),
		abi.RegMaxMTU / 4: uint32(engine.MTU4096), abi.RegMaxEQ / 4: abi.NumVectors, abi.RegMaxAH / 4: abi.MaxAH,
		abi.RegGIDTblLen / 4: abi.GIDTableLen, abi.RegCtrlQMax / 4: abi.CtrlQMaxLog,
	}
	return regs[off/4]
}

// stateRegLocked reads the registers of the function's state: control and status, the port,
// the MAC, the control queue's, the GIDs' validity.
func (f *Function) stateRegLocked(off uint32) uint32 {
	r := &f.regs
	switch off {
	case abi.RegDevCtrl:
		return r.ctrl
	case abi.RegDevStatus:
		return r.status
	case abi.RegFatalCode:
		return r.fatal
	case abi.RegPortState:
		if f.dev != nil && f.dev.PortActive() {
			return abi.PortActive
		}
		return abi.PortDown
	case abi.RegMACLo:
		return r.macLo
	case abi.RegMACHi:
		return r.macHi
	case abi.RegCtrlQBaseL:
		return uint32(r.ctrlQBase)
	case abi.RegCtrlQBaseH:
		return uint32(r.ctrlQBase >> 32)
	case abi.RegCtrlQLog:
		return r.ctrlQLog
	case abi.RegCtrlQProd:
		return r.ctrlQProd
	case abi.RegCtrlQCons:
		return r.ctrlQCons
	case abi.RegGIDValid:
		return r.gidValid
	}
	return 0
}

// writeRegLocked writes a register and returns the vectors to signal once the lock is released.
func (f *Function) writeRegLocked(off uint32, v uint32) []int {
	r := &f.regs
	if off >= abi.RegGIDTable && off < abi.RegGIDTable+16*abi.GIDTableLen {
		i := (off - abi.RegGIDTable) / 16
		binary.LittleEndian.PutUint32(r.gids[i][(off-abi.RegGIDTable)%16:], v)
		return nil
	}
	switch off {
	case abi.RegDevCtrl:
		if v&abi.DevCtrlReset != 0 {
			f.resetLocked()
			return nil
		}
		if v&abi.DevCtrlEnable != 0 && r.ctrl&abi.DevCtrlEnable == 0 {
			r.ctrl |= abi.DevCtrlEnable
			f.enableLocked()
		}
	case abi.RegMACLo:
		r.macLo = v
	case abi.RegMACHi:
		r.macHi = v & 0xffff
		f.readdressLocked()
	case abi.RegCtrlQBaseL:
		r.ctrlQBase = r.ctrlQBase&^0xffffffff | uint64(v)
	case abi.RegCtrlQBaseH:
		r.ctrlQBase = r.ctrlQBase&0xffffffff | uint64(v)<<32
	case abi.RegCtrlQLog:
		r.ctrlQLog, r.ctrlQProd, r.ctrlQCons = v, 0, 0
	case abi.RegCtrlQProd:
		return f.ringCtrlQLocked(v)
	case abi.RegEthTXProd:
		if r.ctrl&abi.DevCtrlEnable == 0 || r.status&abi.DevStatusFatal != 0 {
			return nil
		}
		return f.ethTransmitLocked(v)
	case abi.RegGIDValid:
		r.gidValid = v & (1<<abi.GIDTableLen - 1)
		f.readdressLocked()
	}
	return nil
}

// ringable is the most work requests or CQEs a ring can be asked for: a driver sizes a ring
// for n as the power of two above n (one slot stays empty, as in rxe), and the ring may have
// at most maxCount slots. Reporting the engine's own limit would let a driver ask for a ring
// twice the largest the device takes.
func ringable(limit, maxCount int) uint32 {
	n := 1
	for n*2 <= maxCount && n*2-1 <= limit {
		n *= 2
	}
	return uint32(n - 1)
}
