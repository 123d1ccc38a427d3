package abi

// The Ethernet function (CapEthernet): the frames on the device's link that are not RoCEv2 for
// it reach the driver's netdev through an RX ring, and the netdev's frames go out through a TX
// ring. Each ring is a queue in rxe's layout (QueueHeaderSize-byte header, producer and consumer
// on their own cache lines, stored masked, one slot always empty) of EthDescSize-byte
// descriptors, made by OpCreateEthRing. TX: the driver fills descriptors, advances the ring's
// producer index and writes it to RegEthTXProd; the device sends each frame and advances the
// consumer, signalling the ring's vector. RX: the driver posts empty buffers by advancing the
// producer (no doorbell); the device fills the next buffer with a frame, writes the frame's
// length and EthDescDone into its descriptor, advances the consumer and signals the vector. A
// frame finding no posted buffer, or one too small, is dropped and counted.
const (
	OpCreateEthRing  = 0x70 // args: EthRingArgs
	OpDestroyEthRing = 0x71 // args: u8 kind at EthRingKind. ResultEthDropped: frames dropped (RX: no buffer or too small; TX: malformed)

	EthRingArgsSize = EthRingQueue + QueueArgsSize
	EthRingKind     = 0 // u8: EthTX, EthRX
	EthRingVector   = 2 // u16: MSI-X vector, below NumVectors
	EthRingFlags    = 4 // u32: EthRing* flags
	EthRingQueue    = 8 // QueueArgs: at most EthMaxLog descriptors

	EthTX = 0
	EthRX = 1

	EthRingPromisc = 1 // RX: every frame that is not RoCEv2 for the device, not only those to its MAC, broadcast and multicast

	EthDescSize  = 16
	EthDescAddr  = 0  // u64: the buffer, guest-physical, in one piece
	EthDescLen   = 8  // u32: TX: the frame's length; RX: the buffer's, replaced by the frame's
	EthDescFlags = 12 // u32: EthDesc* flags, written by the device

	EthDescDone = 1 << 31 // RX: the device filled the buffer

	EthMinFrame = 14   // an Ethernet header
	EthMaxFrame = 9216 // a jumbo frame: the largest a link carries

	RegEthTXProd = 0x140 // wo: the TX ring's doorbell, its producer index
)
