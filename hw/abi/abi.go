// Package abi is the softirdma PCI function's interface to its drivers: PCI identity, BARs,
// registers, the control queue and its commands, page lists, event queues, the address-vector
// table, and the work queues in Linux rxe's user layout. It is the one definition the device
// model and every driver (the Go driver, and through a generated header the Linux one) use;
// docs/device.md explains it byte by byte. Everything is little-endian.
//
// Offsets are constants so that both sides compile them in; Layouts lists every structure with
// its fields so that a test can check them (no overlap, natural alignment, the sizes the rxe
// UAPI fixes) and the C header can be generated from the same numbers.
package abi

// Version is the ABI version in the VERSION register: major in the high 16 bits. A driver
// refuses a major it does not know; minors only add.
const (
	VersionMajor = 1
	VersionMinor = 3 // 1.1: UD, UC and GSI QPs, the AV table read, multicast, the DMA MR; 1.2: CQ moderation; 1.3: on-demand paging
	Version      = VersionMajor<<16 | VersionMinor
)

// PCI identity. 0x1234 is not a PCI-SIG vendor ID: QEMU's own emulated devices use it (stdvga
// 1234:1111, edu 1234:11e8), so no driver for real hardware binds to it. QEMU's x-pci-vendor-id
// and friends override these.
const (
	PCIVendorID          = 0x1234
	PCIDeviceID          = 0x5352 // "SR"
	PCISubsystemVendorID = 0x1234
	PCISubsystemID       = 0x0001
	PCIRevision          = VersionMajor
	PCIClassCode         = 0x020000 // network controller, Ethernet: the function is also a NIC
)

// BARs: all 32-bit, non-prefetchable memory, power-of-two sizes.
const (
	BARRegs      = 0 // registers and the GID table
	BARRegsSize  = 1 << 14
	BARDoorbell  = 2 // one send-queue doorbell per QP slot, one arm register per CQ slot
	BARDoorbells = 1 << 16
	MSIXBar      = 4 // MSI-X table and PBA
	MSIXBarSize  = 1 << 13

	MSIXTableOffset = 0x0000
	PBAOffset       = 0x1000
	NumVectors      = 16 // vector 0: control queue; EQs choose theirs
)

// Registers in BAR 0. 32 bits each unless named _LO/_HI.
const (
	RegMagic      = 0x000 // ro: MagicValue
	RegVersion    = 0x004 // ro: Version
	RegCaps       = 0x008 // ro: Cap* bits
	RegPageSizes  = 0x00c // ro: bit n set: pages of 2^n bytes accepted in page lists
	RegMaxQP      = 0x010 // ro: QP slots; QP slot numbers are below it
	RegMaxQPWR    = 0x014
	RegMaxSGE     = 0x018
	RegMaxInline  = 0x01c
	RegMaxCQ      = 0x020
	RegMaxCQE     = 0x024
	RegMaxSRQ     = 0x028
	RegMaxSRQWR   = 0x02c
	RegMaxMR      = 0x030
	RegMaxMW      = 0x034
	RegMaxPD      = 0x038
	RegMaxRdAtom  = 0x03c // max_qp_rd_atom and max_qp_init_rd_atom
	RegMaxMsgSize = 0x040
	RegMaxMTU     = 0x044 // ibv_mtu: 1 (256) to 5 (4096)
	RegMaxEQ      = 0x048
	RegMaxAH      = 0x04c
	RegGIDTblLen  = 0x050
	RegCtrlQMax   = 0x054 // largest CtrlQLog accepted

	RegDevCtrl    = 0x100 // rw: DevCtrl* bits
	RegDevStatus  = 0x104 // ro: DevStatus* bits
	RegFatalCode  = 0x108 // ro: Fatal* code once DevStatusFatal is set
	RegPortState  = 0x10c // ro: ibv_port_state (1 DOWN, 4 ACTIVE)
	RegMACLo      = 0x110 // rw: MAC bytes 0-3 (byte 0 in bits 0-7)
	RegMACHi      = 0x114 // rw: MAC bytes 4-5 in bits 0-15
	RegCtrlQBaseL = 0x120 // rw: control queue ring, guest-physical, 4 KiB aligned
	RegCtrlQBaseH = 0x124
	RegCtrlQLog   = 0x128 // rw: log2 of the ring's entries; 0: no control queue
	RegCtrlQProd  = 0x12c // rw: the doorbell: the driver's producer index (masked)
	RegCtrlQCons  = 0x130 // ro: the device's consumer index (masked)
	RegGIDValid   = 0x1f0 // rw: bit i set: GID table entry i is valid
	RegGIDTable   = 0x200 // rw: GIDTableLen entries of 16 bytes (network order)

	MagicValue  = 0x4d445253 // "SRDM" read as bytes
	GIDTableLen = 16
)

// Capabilities in RegCaps.
const (
	CapMWType1      = 1 << 0
	CapMWType2A     = 1 << 1
	CapMWType2B     = 1 << 2
	CapAtomics      = 1 << 3
	CapSRQ          = 1 << 4
	CapFlush        = 1 << 5
	CapAtomicWrite  = 1 << 6
	CapFastReg      = 1 << 7
	CapZeroBased    = 1 << 8
	CapCQModeration = 1 << 9  // OpModifyCQ (ABI 1.2)
	CapOnDemand     = 1 << 10 // on-demand MRs, the page-fault EQ, OpMapPages, OpUnmapPages, OpResumeQP (ABI 1.3)
	CapEthernet     = 1 << 16 // the Ethernet function (TX/RX frame rings, eth.go)
	CapUD           = 1 << 17 // UD, UC and GSI QPs, address vectors, multicast, the DMA MR (ABI 1.1)
)

// RegDevCtrl and RegDevStatus bits.
const (
	DevCtrlEnable = 1 << 0 // start serving the control queue and doorbells
	DevCtrlReset  = 1 << 1 // write 1: back to power-on state; reads 0 once done

	DevStatusReady = 1 << 0
	DevStatusFatal = 1 << 1
)

// Fatal codes in RegFatalCode.
const (
	FatalNone       = 0
	FatalCtrlQDMA   = 1 // the control queue ring is not in mapped guest memory
	FatalCtrlQSetup = 2 // CtrlQLog out of range or the ring misaligned
	FatalBusMaster  = 3 // the control queue was rung with bus mastering off
)

// BAR 2 doorbells. The driver writes the send queue's new producer index (any 32-bit write
// rings it) to SQDoorbell(slot); it arms a CQ by writing Arm* to CQArm(slot).
const (
	SQDoorbellBase = 0x0000
	CQArmBase      = 0x8000
	DoorbellStride = 8 // between one slot's register and the next's
	MaxQPSlots     = (CQArmBase - SQDoorbellBase) / DoorbellStride
	MaxCQSlots     = (BARDoorbells - CQArmBase) / DoorbellStride

	ArmNext      = 1 // the next completion
	ArmSolicited = 2 // the next solicited completion (or error)
)

// SQDoorbell is the BAR 2 offset of QP slot's send-queue doorbell.
func SQDoorbell(slot uint32) uint32 { return SQDoorbellBase + DoorbellStride*slot }

// CQArm is the BAR 2 offset of CQ slot's arm register.
func CQArm(slot uint32) uint32 { return CQArmBase + DoorbellStride*slot }

//go:generate go run ./cheader/genheader -src . -o ../linux/softirdma_abi.h
