package keys

import (
	"runtime"
	"testing"
)

// TestFreshSpaceHeap: a device with one MR and one MW pays for a few slots, not for a whole
// chunk of each table, so a simulation of many devices stays small.
func TestFreshSpaceHeap(t *testing.T) {
	const limit = 16 << 10
	spec := MRSpec{PD: pdA, Mem: Contiguous(make([]byte, 64)), IOVA: 0x1000, Access: LocalWrite | RemoteWrite | MWBind}
	rnd := Seeded(1)
	least := ^uint64(0)
	for range 5 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := New(Config{Rand: rnd})
		if _, err := s.RegMR(spec); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AllocMW(pdA, MWType2); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(s)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	t.Logf("a Space with one MR and one MW allocates %d bytes", least)
	if least > limit {
		t.Fatalf("a Space with one MR and one MW allocates %d bytes, want at most %d", least, limit)
	}
}

// TestTableGrowth: as a table grows block by block, every slot keeps its address, every index
// names the slot it was handed out with, and no slot is made beyond the table's max.
func TestTableGrowth(t *testing.T) {
	for _, n := range []uint32{1, chunkSize - 1, chunkSize, chunkSize + 1, 3*maxBlock*chunkSize + 7} {
		tb := newTable[mrEntry](mrIndexBase, n)
		rnd := Seeded(2)
		var got []*slot[mrEntry]
		for range n {
			s := tb.alloc(rnd)
			if s == nil {
				t.Fatalf("max %d: full after %d", n, len(got))
			}
			got = append(got, s)
		}
		if tb.alloc(rnd) != nil {
			t.Fatalf("max %d: slot beyond max", n)
		}
		if made := uint32(len(tb.chunks)) * chunkSize; made >= n+chunkSize {
			t.Fatalf("max %d: %d slots made", n, made)
		}
		for i, s := range got {
			idx := mrIndexBase + uint32(i)
			if s.key.Index() != idx || tb.get(idx) != s {
				t.Fatalf("max %d: index %#x names %p, was handed out as %p with key %v", n, idx, tb.get(idx), s, s.key)
			}
		}
		if tb.get(mrIndexBase+n) != nil || tb.get(mrIndexBase-1) != nil {
			t.Fatalf("max %d: index outside the table names a slot", n)
		}
	}
}
