package roce

import (
	"hash/crc32"
	"testing"
)

// TestCRCUpdate: the word-at-a-time tail gives what hash/crc32 gives, for every length and start.
func TestCRCUpdate(t *testing.T) {
	data := make([]byte, 300)
	for i := range data {
		data[i] = 9 + byte(i*7)
	}
	for start := range 9 {
		for n := 0; start+n <= len(data); n++ {
			p := data[start : start+n]
			for _, seed := range []uint32{0, ff8CRC, 0xDEADBEEF} {
				if got, want := crcUpdate(seed, p), crc32.Update(seed, crc32.IEEETable, p); got != want {
					t.Fatalf("start %d len %d seed %#x: %#x, want %#x", start, n, seed, got, want)
				}
			}
		}
	}
}
