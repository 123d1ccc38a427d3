//go:build lockcheck

package engine

import (
	"strings"
	"sync"
	"testing"
)

// takeAndLetGo takes l and lets go of it at once: all a check of the lock order looks at.
func takeAndLetGo(l sync.Locker) {
	l.Lock()
	//lint:ignore SA2001 the order check looks at the taking alone
	l.Unlock()
}

// lockPanic runs f and returns what it panicked with, "" if it did not.
func lockPanic(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg, _ = r.(string)
			if msg == "" {
				msg = "non-string panic"
			}
		}
	}()
	f()
	return ""
}

func TestLockOrderChecked(t *testing.T) {
	var qp mutex[qpLock]
	var tab mutex[tablesLock]
	var cq mutex[cqLock]
	var pins rwMutex[pinsLock]

	// In order: nothing to say.
	if msg := lockPanic(func() {
		qp.Lock()
		tab.Lock()
		pins.RLock()
		//lint:ignore SA2001 the order check looks at the taking alone
		pins.RUnlock()
		tab.Unlock()
		qp.Unlock()
	}); msg != "" {
		t.Fatalf("locks taken in order: %s", msg)
	}

	// Out of order: the check fires before the second lock is taken, naming both.
	msg := lockPanic(func() {
		cq.Lock()
		defer cq.Unlock()
		takeAndLetGo(&tab)
	})
	if want := "engine lock order: taking Device.tab while holding CQ.mu"; !strings.HasPrefix(msg, want) {
		t.Fatalf("Device.tab after CQ.mu: panic %q, want it to start %q", msg, want)
	}
	if !tab.Mutex.TryLock() {
		t.Fatal("Device.tab was taken although the check refused it")
	}
	tab.Mutex.Unlock()

	// Two locks of one rank are never held together.
	var other mutex[qpLock]
	msg = lockPanic(func() {
		qp.Lock()
		defer qp.Unlock()
		takeAndLetGo(&other)
	})
	if want := "engine lock order: taking QP.mu while holding QP.mu"; !strings.HasPrefix(msg, want) {
		t.Fatalf("a second QP.mu: panic %q, want it to start %q", msg, want)
	}

	// What one goroutine holds does not bind another.
	cq.Lock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		msg = lockPanic(func() {
			takeAndLetGo(&tab)
		})
	}()
	wg.Wait()
	cq.Unlock()
	if msg != "" {
		t.Fatalf("Device.tab on a goroutine holding nothing while another holds CQ.mu: %s", msg)
	}

	// Letting go of a lock not held is reported too.
	msg = lockPanic(func() { lockRelease(rankOutbox) })
	if want := "engine lock order: letting go of outbox.mu"; !strings.HasPrefix(msg, want) {
		t.Fatalf("releasing outbox.mu not held: panic %q, want it to start %q", msg, want)
	}
}
