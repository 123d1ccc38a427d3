package roce

// Link moves whole Ethernet frames between softirdma and something else: a QEMU guest's NIC, a
// real adapter, the simulator's fabric. Both directions work in batches so a link can use
// sendmmsg/recvmmsg where it has them.
type Link interface {
	// SendBatch transmits the frames in order and reports how many it sent. It does not keep
	// them after it returns.
	SendBatch(frames [][]byte) (int, error)
	// RecvBatch waits for at least one frame, copies up to len(bufs) frames into bufs (each
	// should hold MaxFrameLen bytes), records their lengths in sizes and returns how many.
	// A frame too large for its buffer, or otherwise not a frame, is counted and dropped. A
	// link that holds frames in memory may instead put a buffer of its own, as long, in
	// bufs[i] and keep the caller's: callers keep no other reference to their buffers.
	RecvBatch(bufs [][]byte, sizes []int) (int, error)
	// Close stops the link; a blocked RecvBatch returns an error.
	Close() error
}

// MaxFrameLen is the largest Ethernet frame a link carries: a 4096-byte RoCE MTU with IPv6, two
// VLAN tags and the longest extension headers fits, as does a 9000-byte jumbo frame.
const MaxFrameLen = 9216

// LinkStats counts what a link did.
type LinkStats struct {
	TxFrames, TxBytes, RxFrames, RxBytes uint64
	// RxDropped counts frames that arrived but were not frames: oversized, truncated, or a
	// stream length prefix out of range.
	RxDropped uint64
}
