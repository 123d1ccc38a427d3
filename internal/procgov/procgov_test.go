package procgov

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The governor's decisions, window by window.
func TestStep(t *testing.T) {
	w := 100 * time.Millisecond
	for _, c := range []struct {
		name               string
		cur, most          int
		used, window       time.Duration
		calm               int
		wantNext, wantCalm int
	}{
		{"one processor busy: a second", 1, 2, 85 * time.Millisecond, w, 0, 2, 0},
		{"one processor at the threshold: a second", 1, 2, 80 * time.Millisecond, w, 0, 2, 0},
		{"one processor under the threshold: stays", 1, 2, 79 * time.Millisecond, w, 0, 1, 0},
		{"at most already: stays", 2, 2, 200 * time.Millisecond, w, 0, 2, 0},
		{"two busy, four allowed: a third", 2, 4, 170 * time.Millisecond, w, 0, 3, 0},
		{"two, under half of one: one calm window", 2, 4, 40 * time.Millisecond, w, 0, 2, 1},
		{"two, calm long enough: one", 2, 4, 40 * time.Millisecond, w, CalmWindows - 1, 1, 0},
		{"two, between the thresholds: calm starts again", 2, 4, 70 * time.Millisecond, w, 5, 2, 0},
		{"one, idle: never below one", 1, 4, 0, w, CalmWindows, 1, 0},
		{"no time passed: nothing decided", 2, 4, time.Second, 0, 3, 2, 0},
	} {
		next, calm := Step(c.cur, c.most, c.used, c.window, c.calm)
		if next != c.wantNext || calm != c.wantCalm {
			t.Errorf("%s: Step(%d, %d, %v, %v, %d) = %d, %d; want %d, %d", c.name, c.cur, c.most, c.used, c.window, c.calm, next, calm, c.wantNext, c.wantCalm)
		}
	}
}

// start sets one processor, gives a busy process a second, takes it back once the process has
// been calm for CalmWindows windows, never goes above most, and gives back the setting it found.
func TestStartFollowsTheLoad(t *testing.T) {
	found := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(found) })
	runtime.GOMAXPROCS(3)
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	type change struct{ from, to, procs int }
	changes := make(chan change, 64)
	var used atomic.Int64 // the process's CPU time as the governor reads it
	started := make(chan struct{})
	var once sync.Once
	cpu := func() time.Duration {
		once.Do(func() { close(started) }) // the governor's first reading, before any window
		return time.Duration(used.Load())
	}
	stop := start(ctx, 2, func(from, to int) { changes <- change{from, to, runtime.GOMAXPROCS(0)} }, cpu, tick)
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("once started, GOMAXPROCS %d, want 1", got)
	}
	<-started
	now := time.Now()
	// window ends a window in which the process used busy. The governor takes a tick only once
	// it has done with the one before, so after window returns, every change before it has been
	// sent.
	window := func(busy time.Duration) {
		used.Add(int64(busy))
		now = now.Add(Window)
		tick <- now
	}
	want := func(w change) {
		t.Helper()
		select {
		case c := <-changes:
			if c != w {
				t.Fatalf("change %+v, want %+v", c, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no change, want %+v", w)
		}
	}
	none := func(why string) {
		t.Helper()
		select {
		case c := <-changes:
			t.Fatalf("change %+v %s", c, why)
		default:
		}
	}
	window(Window) // one processor's worth: busy
	want(change{1, 2, 2})
	for range CalmWindows - 1 {
		window(0)
	}
	none("before the process was calm for CalmWindows windows")
	window(0)
	want(change{2, 1, 1})
	window(2 * Window)
	want(change{1, 2, 2})
	window(2 * Window) // two processors busy, and most is 2
	window(Window / 2)
	none("above most")
	stop()
	cancel()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("once stopped, GOMAXPROCS %d, want the 3 it found", got)
	}
}
