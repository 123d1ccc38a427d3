package hw

import (
	"math/bits"
	"testing"
)

// The limits a driver reads are what it can ask for: a ring for the reported number, sized as
// the power of two above it, is one the device takes.
func TestRingableLimits(t *testing.T) {
	for _, c := range []struct{ limit, maxCount, want int }{
		{1 << 14, 1<<14 + 1, 1<<14 - 1},
		{1 << 20, 1 << 20, 1<<20 - 1},
		{1<<14 - 1, 1 << 20, 1<<14 - 1},
		{1, 2, 1},
	} {
		got := int(ringable(c.limit, c.maxCount))
		if got != c.want {
			t.Errorf("ringable(%d, %d) = %d, want %d", c.limit, c.maxCount, got, c.want)
		}
		if ring := 1 << bits.Len(uint(got)); ring > c.maxCount || got > c.limit {
			t.Errorf("ringable(%d, %d) = %d: its ring of %d does not fit", c.limit, c.maxCount, got, ring)
		}
	}
}
