package keys

import "math/rand/v2"

// Index ranges. MR and MW indices never overlap (rxe once let MR indices grow into its MW range
// and every remote access failed: check K3), so a key's index alone says which table it names.
// Index 0 is never handed out, so key 0 never names an object.
const (
	mrIndexBase = 1
	mwIndexBase = 1 << 23
	indexLimit  = 1 << 24

	// DefaultMaxMR and DefaultMaxMW are the table sizes a zero Config gets: every index of
	// each range.
	DefaultMaxMR = mwIndexBase - mrIndexBase
	DefaultMaxMW = indexLimit - mwIndexBase

	// reuseDelay is how many freed indices wait, first in first out, before one is handed
	// out again while the table may still grow. Together with a new key8 on every reuse it
	// keeps a stale key from meeting its index again soon.
	reuseDelay = 1024

	// Slots are addressed in chunks of chunkSize, one pointer each in the table's directory,
	// so a lookup is a shift, a mask and two loads whatever the table's size. Their memory
	// comes in blocks that double from one chunk up to maxBlock chunks (4,096 slots) and stay
	// at that size after: a device with one MR pays for 16 slots, not 4,096, and a million
	// MRs still cost a few hundred allocations. The directory adds half a byte per slot.
	chunkBits = 4
	chunkSize = 1 << chunkBits
	maxBlock  = 4096 / chunkSize
)

// slot is one index of a table: the entry, its current key, and how the last key it had was
// revoked (kept after the entry is freed, for error messages and the next key8).
type slot[E any] struct {
	key     Key
	live    bool
	revoked Revocation
	e       E
}

// table hands out indices of one range. Slots live in fixed chunks so their addresses stay put
// as the table grows: growing copies no entry.
type table[E any] struct {
	base, max uint32                // first index, number of indices
	chunks    []*[chunkSize]slot[E] // chunk i holds positions [i*chunkSize, (i+1)*chunkSize); may run ahead of size
	size      uint32                // slots handed out so far; positions [0, size) exist
	free      fifo
	live      int
}

func newTable[E any](base, max uint32) table[E] { return table[E]{base: base, max: max} }

// get returns the slot the index names, or nil when the index is outside this table or was
// never created.
func (t *table[E]) get(index uint32) *slot[E] {
	pos := index - t.base // wraps to a huge value below base
	if pos >= t.size {
		return nil
	}
	return &t.chunks[pos>>chunkBits][pos&(chunkSize-1)]
}

// alloc takes an index and gives its slot a fresh key whose key8 differs from the last key8 the
// index carried. It returns nil when the table is full.
func (t *table[E]) alloc(rnd rand.Source) *slot[E] {
	var pos uint32
	reuse := t.free.len() > reuseDelay || (t.size == t.max && t.free.len() > 0)
	switch {
	case reuse:
		pos = t.free.pop()
	case t.size < t.max:
		pos = t.size
		if pos>>chunkBits == uint32(len(t.chunks)) {
			t.grow()
		}
		t.size++
	default:
		return nil
	}
	s := &t.chunks[pos>>chunkBits][pos&(chunkSize-1)]
	index := t.base + pos
	var key8 uint8
	if reuse {
		key8 = nextKey8(rnd, s.key.Key8())
	} else {
		key8 = uint8(rnd.Uint64())
	}
	var zero E
	s.e = zero
	s.key = makeKey(index, key8)
	s.live = true
	t.live++
	return s
}

// grow adds the next block of chunks: as many as the table has (one at first), at most maxBlock,
// and none beyond the table's max.
func (t *table[E]) grow() {
	have := uint32(len(t.chunks))
	n := min(max(have, 1), maxBlock, (t.max-have*chunkSize+chunkSize-1)/chunkSize)
	block := make([][chunkSize]slot[E], n)
	for i := range block {
		t.chunks = append(t.chunks, &block[i])
	}
}

// release frees the slot's index; its key stays recorded as revoked.
func (t *table[E]) release(s *slot[E], why Revocation) {
	s.live = false
	s.revoked = why
	var zero E
	s.e = zero
	t.live--
	t.free.push(s.key.Index() - t.base)
}

// nextKey8 draws a key8 uniformly from the 255 values other than prev.
func nextKey8(rnd rand.Source, prev uint8) uint8 {
	return prev + 1 + uint8(rnd.Uint64()%255)
}

// fifo is a growable ring of free positions.
type fifo struct {
	buf        []uint32
	head, tail int // tail-head = count; both index buf modulo len(buf)
}

func (f *fifo) len() int { return f.tail - f.head }

func (f *fifo) push(v uint32) {
	if f.len() == len(f.buf) {
		n := make([]uint32, max(16, 2*len(f.buf)))
		for i := range f.len() {
			n[i] = f.buf[(f.head+i)%len(f.buf)]
		}
		f.tail, f.head, f.buf = f.len(), 0, n
	}
	f.buf[f.tail%len(f.buf)] = v
	f.tail++
}

func (f *fifo) pop() uint32 {
	v := f.buf[f.head%len(f.buf)]
	f.head++
	if f.head >= len(f.buf) {
		f.head -= len(f.buf)
		f.tail -= len(f.buf)
	}
	return v
}
