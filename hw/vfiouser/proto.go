package vfiouser

import (
	"errors"
	"fmt"
	"syscall"
)

// Command is a vfio-user message's command number.
type Command uint16

// The commands of the protocol. The server answers every one QEMU's client sends; the rest
// (GET_REGION_IO_FDS, DMA_READ/WRITE from a client, dirty pages, migration) get ENOSYS.
const (
	CmdVersion          Command = 1
	CmdDMAMap           Command = 2
	CmdDMAUnmap         Command = 3
	CmdDeviceGetInfo    Command = 4
	CmdRegionInfo       Command = 5
	CmdRegionIOFDs      Command = 6
	CmdIRQInfo          Command = 7
	CmdSetIRQs          Command = 8
	CmdRegionRead       Command = 9
	CmdRegionWrite      Command = 10
	CmdDMARead          Command = 11
	CmdDMAWrite         Command = 12
	CmdDeviceReset      Command = 13
	CmdRegionWriteMulti Command = 15
)

func (c Command) String() string {
	if n, ok := cmdNames[c]; ok {
		return n
	}
	return fmt.Sprintf("command(%d)", uint16(c))
}

var cmdNames = map[Command]string{
	CmdVersion: "VERSION", CmdDMAMap: "DMA_MAP", CmdDMAUnmap: "DMA_UNMAP",
	CmdDeviceGetInfo: "DEVICE_GET_INFO", CmdRegionInfo: "DEVICE_GET_REGION_INFO",
	CmdRegionIOFDs: "DEVICE_GET_REGION_IO_FDS", CmdIRQInfo: "DEVICE_GET_IRQ_INFO",
	CmdSetIRQs: "DEVICE_SET_IRQS", CmdRegionRead: "REGION_READ", CmdRegionWrite: "REGION_WRITE",
	CmdDMARead: "DMA_READ", CmdDMAWrite: "DMA_WRITE", CmdDeviceReset: "DEVICE_RESET",
	CmdRegionWriteMulti: "REGION_WRITE_MULTI",
}

// Header flags.
const (
	FlagTypeMask = 0xf
	FlagCommand  = 0
	FlagReply    = 1
	FlagNoReply  = 0x10
	FlagError    = 0x20
)

// HeaderSize is the size of every message's header.
const HeaderSize = 16

// Header is the 16-byte header every message starts with, in host (little-endian) byte order.
type Header struct {
	ID    uint16
	Cmd   Command
	Size  uint32 // the whole message, header included
	Flags uint32
	Errno uint32 // error replies only
}

func (h Header) put(b []byte) {
	v := headerView(b[:HeaderSize])
	v.setID(h.ID)
	v.setCmd(h.Cmd)
	v.setSize(h.Size)
	v.setFlags(h.Flags)
	v.setErrno(h.Errno)
}

func parseHeader(b []byte) Header {
	v := headerView(b[:HeaderSize])
	return Header{ID: v.id(), Cmd: v.cmd(), Size: v.size(), Flags: v.flags(), Errno: v.errno()}
}

// DMA_MAP and DMA_UNMAP flags.
const (
	DMARead     = 1
	DMAWrite    = 2
	DMAUnmapAll = 2 // in DMA_UNMAP
	dmaDirty    = 1 // DMA_UNMAP's dirty bitmap, never advertised
)

// Device info flags (DEVICE_GET_INFO).
const (
	DeviceFlagReset = 1
	DeviceFlagPCI   = 2
)

// Region flags (DEVICE_GET_REGION_INFO).
const (
	RegionFlagRead  = 1
	RegionFlagWrite = 2
	RegionFlagMmap  = 4
	RegionFlagCaps  = 8
)

// The sparse-mmap capability's id and version.
const (
	capSparseMmap    = 1
	capSparseMmapVer = 1
)

// IRQ info flags (DEVICE_GET_IRQ_INFO).
const (
	IRQEventfd   = 1
	IRQMaskable  = 2
	IRQAutomask  = 4
	IRQNoResize  = 8
	irqInfoFlags = IRQEventfd | IRQMaskable | IRQAutomask | IRQNoResize
)

// DEVICE_SET_IRQS flags: one data type and one action.
const (
	IRQDataNone     = 1
	IRQDataBool     = 2
	IRQDataEventfd  = 4
	IRQActionMask   = 8
	IRQActionUnmask = 16
	IRQActionTrig   = 32
	irqDataMask     = IRQDataNone | IRQDataBool | IRQDataEventfd
	irqActionMask   = IRQActionMask | IRQActionUnmask | IRQActionTrig
)

// PCI region and IRQ indices as QEMU's vfio-user-pci uses them.
const (
	PCIBAR0Region   = 0
	PCIROMRegion    = 6
	PCIConfigRegion = 7
	PCIVGARegion    = 8
	PCINumRegions   = 9

	PCIINTxIRQ   = 0
	PCIMSIIRQ    = 1
	PCIMSIXIRQ   = 2
	PCIErrIRQ    = 3
	PCIReqIRQ    = 4
	PCINumIRQs   = 5
	maxMultiWr   = 200 // QEMU's VFIO_USER_MULTI_MAX
	multiWrData  = 8   // bytes of data in one REGION_WRITE_MULTI entry
	multiWrEntry = 24
)

// Sizes of the fixed parts of the messages.
const (
	dmaMapSize      = 32
	dmaUnmapSize    = 24
	deviceInfoSize  = 16
	regionInfoSize  = 32
	irqInfoSize     = 16
	irqSetSize      = 20
	regionRWSize    = 16
	sparseCapHeader = 16
	sparseAreaSize  = 16
)

// RemoteError is an error reply: the command and the errno the server answered with.
type RemoteError struct {
	Cmd   Command
	Errno syscall.Errno
}

func (e *RemoteError) Error() string { return fmt.Sprintf("vfio-user %s: %v", e.Cmd, e.Errno) }

// Unwrap lets errors.Is(err, syscall.EINVAL) see the errno.
func (e *RemoteError) Unwrap() error { return e.Errno }

// errnoOf is the errno an error reply carries for err: its own errno if it has one, EIO if not.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return syscall.EIO
}

// msgError is a request the server refuses: the errno for the reply and the reason for the log.
type msgError struct {
	errno  syscall.Errno
	reason string
}

func (e *msgError) Error() string { return e.reason + ": " + e.errno.Error() }
func (e *msgError) Unwrap() error { return e.errno }

func refuse(errno syscall.Errno, format string, args ...any) error {
	return &msgError{errno: errno, reason: fmt.Sprintf(format, args...)}
}
