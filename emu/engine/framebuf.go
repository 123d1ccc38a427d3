package engine

import "github.com/softirdma/softirdma/wire/roce"

// NewFrameBuffer makes a buffer for one frame of up to n bytes with its common payload on a
// cache line (roce.NewFrameBuffer, which links that hand frames over in memory share).
func NewFrameBuffer(n int) []byte { return roce.NewFrameBuffer(n) }
