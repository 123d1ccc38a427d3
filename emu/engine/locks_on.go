//go:build lockcheck

package engine

import (
	"fmt"
	"sync"
)

// mutex is a sync.Mutex of the lock kind R whose order against the others is checked.
type mutex[R ranked] struct{ sync.Mutex }

func (m *mutex[R]) Lock()   { lockAcquire(rankOf[R]()); m.Mutex.Lock() }
func (m *mutex[R]) Unlock() { m.Mutex.Unlock(); lockRelease(rankOf[R]()) }

// rwMutex is a sync.RWMutex of the lock kind R whose order against the others is checked,
// for readers and writers alike.
type rwMutex[R ranked] struct{ sync.RWMutex }

func (m *rwMutex[R]) Lock()    { lockAcquire(rankOf[R]()); m.RWMutex.Lock() }
func (m *rwMutex[R]) Unlock()  { m.RWMutex.Unlock(); lockRelease(rankOf[R]()) }
func (m *rwMutex[R]) RLock()   { lockAcquire(rankOf[R]()); m.RWMutex.RLock() }
func (m *rwMutex[R]) RUnlock() { m.RWMutex.RUnlock(); lockRelease(rankOf[R]()) }

func rankOf[R ranked]() lockRank {
	var r R
	return r.rank()
}

// heldSet is the ranks one goroutine holds, in the order it took them: held by value in
// heldRanks, so that taking and letting go of locks allocates nothing.
type heldSet struct {
	n    int
	rank [int(rankOutbox) + 1]lockRank
}

func (h heldSet) String() string { return fmt.Sprint(h.rank[:h.n]) }

// heldRanks is, for each goroutine holding ranked locks, what it holds.
var heldRanks struct {
	sync.Mutex
	by map[uint64]heldSet
}

// lockAcquire records that this goroutine takes a lock of rank r, and panics before it blocks
// if it already holds one of rank r or higher.
func lockAcquire(r lockRank) {
	id := goroutineID()
	heldRanks.Lock()
	held := heldRanks.by[id]
	for _, h := range held.rank[:held.n] {
		if h >= r {
			heldRanks.Unlock()
			panic(fmt.Sprintf("engine lock order: taking %s while holding %s (held: %s)", r, h, held))
		}
	}
	if heldRanks.by == nil {
		heldRanks.by = make(map[uint64]heldSet)
	}
	held.rank[held.n] = r
	held.n++
	heldRanks.by[id] = held
	heldRanks.Unlock()
}

// lockRelease records that this goroutine let go of its lock of rank r.
func lockRelease(r lockRank) {
	id := goroutineID()
	heldRanks.Lock()
	defer heldRanks.Unlock()
	held := heldRanks.by[id]
	for i := held.n - 1; i >= 0; i-- {
		if held.rank[i] == r {
			copy(held.rank[i:held.n], held.rank[i+1:held.n])
			held.n--
			if held.n == 0 {
				delete(heldRanks.by, id)
			} else {
				heldRanks.by[id] = held
			}
			return
		}
	}
	panic(fmt.Sprintf("engine lock order: letting go of %s, which this goroutine does not hold", r))
}

// lockAtMostQPHeld panics if the calling goroutine holds a lock of the engine other than a
// QP's: where is about to wait for what other QPs do while they hold their own.
func lockAtMostQPHeld(where string) {
	id := goroutineID()
	heldRanks.Lock()
	held := heldRanks.by[id]
	heldRanks.Unlock()
	for _, r := range held.rank[:held.n] {
		if r != rankQP {
			panic(fmt.Sprintf("engine lock order: %s while holding %s", where, held))
		}
	}
}

// lockNoneHeld panics if the calling goroutine holds a lock of the engine: where is about to
// wait for the engine or call out of it.
func lockNoneHeld(where string) {
	id := goroutineID()
	heldRanks.Lock()
	held, ok := heldRanks.by[id]
	heldRanks.Unlock()
	if ok {
		panic(fmt.Sprintf("engine lock order: %s while holding %s", where, held))
	}
}
