package roce

import "unsafe"

// NewFrameBuffer makes a buffer for one frame of up to n bytes, placed so that the payload of
// the most common frame, IPv4 with a bare BTH (payload at byte 54: a SEND or WRITE's middle
// and last packets, every READ response but the first and last), starts on a 64-byte
// boundary. The payload is copied in from registered memory and out into it, and a copy
// between a buffer and memory aligned alike runs at full speed, where one a few bytes off a
// cache line ran at a third of it on the machines measured (see the engine's BenchmarkRCWrite).
// Buffers are recycled from their start, so they keep the alignment for life.
func NewFrameBuffer(n int) []byte {
	const align, payloadAt = 64, 54
	b := make([]byte, n+align-1)
	// Only the address's low bits are read; Go's heap does not move objects.
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	off := int(align-(addr+payloadAt)%align) % align
	return b[off : off+n : off+n]
}
