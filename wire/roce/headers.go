// Package roce owns the RoCEv2 wire format as bytes: zero-copy views of the InfiniBand transport
// headers (BTH and its extension headers), the opcode table, the ICRC, a frame builder and a frame
// parser for Ethernet / IPv4 or IPv6 / UDP 4791 frames, and the Link a frame mover implements. It
// imports no packet library and nothing else of softirdma, so the engine carries none of gopacket;
// package wire adds gopacket layers and pcap on top and re-exports every name here.
//
// Views are byte slices with accessors: they never copy, and a setter writes straight into the
// frame it views. Every multi-byte field is big-endian on the wire; the ICRC is the one
// little-endian field.
package roce

import "encoding/binary"

// Header lengths in bytes.
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	FETHLen         = 4
	// CNPLen is the 16 reserved bytes that follow the BTH of a RoCEv2 congestion notification packet.
	CNPLen  = 16
	ICRCLen = 4

	EthernetLen = 14
	VLANLen     = 4
	IPv4Len     = 20
	IPv6Len     = 40
	UDPLen      = 8

	// UDPPort is the IANA port of RoCEv2.
	UDPPort = 4791
)

// PSNMask keeps the 24 bits of a PSN or QPN.
const PSNMask = 0xFFFFFF

// BTH is a view of the 12-byte Base Transport Header.
type BTH []byte

// Opcode returns byte 0.
func (h BTH) Opcode() Opcode { return Opcode(h[0]) }

// SetOpcode writes byte 0.
func (h BTH) SetOpcode(op Opcode) { h[0] = byte(op) }

// SE is the solicited event bit.
func (h BTH) SE() bool { return h[1]&0x80 != 0 }

// SetSE writes the solicited event bit.
func (h BTH) SetSE(v bool) { h[1] = setBit(h[1], 0x80, v) }

// MigReq is the migration request bit.
func (h BTH) MigReq() bool { return h[1]&0x40 != 0 }

// SetMigReq writes the migration request bit.
func (h BTH) SetMigReq(v bool) { h[1] = setBit(h[1], 0x40, v) }

// PadCnt is the number of pad bytes (0-3) between the payload and the ICRC.
func (h BTH) PadCnt() int { return int(h[1]>>4) & 3 }

// SetPadCnt writes the pad count (only its low two bits).
func (h BTH) SetPadCnt(n int) { h[1] = h[1]&^0x30 | byte(n&3)<<4 }

// TVer is the transport header version; 0 is the only one defined.
func (h BTH) TVer() uint8 { return h[1] & 0x0F }

// SetTVer writes the transport header version.
func (h BTH) SetTVer(v uint8) { h[1] = h[1]&^0x0F | v&0x0F }

// PKey is the partition key (0xFFFF is the default partition).
func (h BTH) PKey() uint16 { return binary.BigEndian.Uint16(h[2:4]) }

// SetPKey writes the partition key.
func (h BTH) SetPKey(v uint16) { binary.BigEndian.PutUint16(h[2:4], v) }

// FECN is the forward explicit congestion notification bit (not covered by the ICRC).
func (h BTH) FECN() bool { return h[4]&0x80 != 0 }

// SetFECN writes the FECN bit.
func (h BTH) SetFECN(v bool) { h[4] = setBit(h[4], 0x80, v) }

// BECN is the backward explicit congestion notification bit (not covered by the ICRC).
func (h BTH) BECN() bool { return h[4]&0x40 != 0 }

// SetBECN writes the BECN bit.
func (h BTH) SetBECN(v bool) { h[4] = setBit(h[4], 0x40, v) }

// DestQP is the 24-bit destination queue pair number.
func (h BTH) DestQP() uint32 { return get24(h[5:8]) }

// SetDestQP writes the destination QPN (low 24 bits).
func (h BTH) SetDestQP(v uint32) { put24(h[5:8], v) }

// AckReq asks the responder to acknowledge this packet.
func (h BTH) AckReq() bool { return h[8]&0x80 != 0 }

// SetAckReq writes the acknowledge request bit.
func (h BTH) SetAckReq(v bool) { h[8] = setBit(h[8], 0x80, v) }

// PSN is the 24-bit packet sequence number.
func (h BTH) PSN() uint32 { return get24(h[9:12]) }

// SetPSN writes the PSN (low 24 bits).
func (h BTH) SetPSN(v uint32) { put24(h[9:12], v) }

// RETH is a view of the 16-byte RDMA Extended Transport Header.
type RETH []byte

// VA is the remote virtual address.
func (h RETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:8]) }

// SetVA writes the remote virtual address.
func (h RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h[0:8], v) }

// RKey is the remote key.
func (h RETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:12]) }

// SetRKey writes the remote key.
func (h RETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[8:12], v) }

// DMALen is the length of the whole RDMA operation, not of this packet.
func (h RETH) DMALen() uint32 { return binary.BigEndian.Uint32(h[12:16]) }

// SetDMALen writes the DMA length.
func (h RETH) SetDMALen(v uint32) { binary.BigEndian.PutUint32(h[12:16], v) }

// AETH is a view of the 4-byte ACK Extended Transport Header.
type AETH []byte

// Syndrome is byte 0: the type in the top three bits and the credit count, RNR timer or NAK code
// below.
func (h AETH) Syndrome() Syndrome { return Syndrome(h[0]) }

// SetSyndrome writes the syndrome.
func (h AETH) SetSyndrome(v Syndrome) { h[0] = byte(v) }

// MSN is the responder's 24-bit message sequence number.
func (h AETH) MSN() uint32 { return get24(h[1:4]) }

// SetMSN writes the MSN (low 24 bits).
func (h AETH) SetMSN(v uint32) { put24(h[1:4], v) }

// AtomicETH is a view of the 28-byte Atomic Extended Transport Header.
type AtomicETH []byte

// VA is the remote virtual address of the 64-bit target.
func (h AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:8]) }

// SetVA writes the remote virtual address.
func (h AtomicETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h[0:8], v) }

// RKey is the remote key.
func (h AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:12]) }

// SetRKey writes the remote key.
func (h AtomicETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[8:12], v) }

// SwapAdd is the swap value of a compare-and-swap or the addend of a fetch-and-add.
func (h AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(h[12:20]) }

// SetSwapAdd writes the swap or add operand.
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:20], v) }

// Compare is the compare operand of a compare-and-swap.
func (h AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(h[20:28]) }

// SetCompare writes the compare operand.
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:28], v) }

// AtomicAckETH is a view of the 8-byte Atomic ACK Extended Transport Header.
type AtomicAckETH []byte

// Orig is the value the target held before the atomic operation.
func (h AtomicAckETH) Orig() uint64 { return binary.BigEndian.Uint64(h[0:8]) }

// SetOrig writes the original value.
func (h AtomicAckETH) SetOrig(v uint64) { binary.BigEndian.PutUint64(h[0:8], v) }

// ImmDt is a view of the 4-byte Immediate Data header.
type ImmDt []byte

// Imm is the immediate value as the wire carries it.
func (h ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(h[0:4]) }

// SetImm writes the immediate value.
func (h ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }

// IETH is a view of the 4-byte Invalidate Extended Transport Header.
type IETH []byte

// RKey is the remote key the responder is asked to invalidate.
func (h IETH) RKey() uint32 { return binary.BigEndian.Uint32(h[0:4]) }

// SetRKey writes the key to invalidate.
func (h IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }

// DETH is a view of the 8-byte Datagram Extended Transport Header of UD packets.
type DETH []byte

// QKey is the queue key.
func (h DETH) QKey() uint32 { return binary.BigEndian.Uint32(h[0:4]) }

// SetQKey writes the queue key.
func (h DETH) SetQKey(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }

// SrcQP is the 24-bit source queue pair number.
func (h DETH) SrcQP() uint32 { return get24(h[5:8]) }

// SetSrcQP writes the source QPN (low 24 bits) and clears the reserved byte.
func (h DETH) SetSrcQP(v uint32) { h[4] = 0; put24(h[5:8], v) }

// FETH is a view of the 4-byte Flush Extended Transport Header of FLUSH requests.
type FETH []byte

// Raw returns the header as one word: the selectivity level and placement type sit in its low bits.
func (h FETH) Raw() uint32 { return binary.BigEndian.Uint32(h[0:4]) }

// SetRaw writes the header word.
func (h FETH) SetRaw(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }

// SelectivityLevel says what a FLUSH covers: 0 the memory region range, 1 the whole region.
func (h FETH) SelectivityLevel() uint8 { return h[3] >> 4 & 3 }

// PlacementType says which persistence a FLUSH asks for (1 global visibility, 2 persistence).
func (h FETH) PlacementType() uint8 { return h[3] & 0x0F }

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func setBit(b, mask byte, v bool) byte {
	if v {
		return b | mask
	}
	return b &^ mask
}
