// Package procgov sets how many processors a process's goroutines run on at once (Go's
// GOMAXPROCS) by how busy the process is: one while it uses less than most of a CPU, more as it
// fills the ones it has.
//
// A device model's path hands work from goroutine to goroutine: a socket's reader, a clock, a
// link's reader. With a processor idle, each handoff to a parked goroutine wakes another thread,
// which looks for work, finds little and sleeps again; on a machine whose VMs keep its CPUs busy
// those wakeups are CPU the VMs lose. On one processor the handoffs stay on one thread. A process
// that keeps its processors busy gains from another, and the governor gives it one; when it calms
// down, it takes it back.
package procgov

import (
	"context"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// UpAt is the share of its processors' time a process must use over one window to be given
	// another processor.
	UpAt = 0.8
	// DownAt is the share of one processor fewer under which the process must stay, CalmWindows
	// windows in a row, to lose a processor. The gap between the two keeps a process that sits
	// near a threshold from moving to and fro.
	DownAt      = 0.5
	CalmWindows = 10
	// Window is how often the governor looks at the process's CPU time.
	Window = 100 * time.Millisecond
)

// Step decides the setting after one window: cur is the present setting, most the highest it may
// take, used the CPU time the process took in a window of length window, and calm the windows in a
// row so far quiet enough to lose a processor. It returns the next setting and the next calm
// count.
func Step(cur, most int, used, window time.Duration, calm int) (next, calmNext int) {
	if window <= 0 || cur < 1 {
		return max(cur, 1), 0
	}
	busy := float64(used) / float64(window) // CPUs' worth of time
	switch {
	case cur < most && busy >= UpAt*float64(cur):
		return cur + 1, 0
	case cur > 1 && busy < DownAt*float64(cur-1):
		if calm+1 >= CalmWindows {
			return cur - 1, 0
		}
		return cur, calm + 1
	}
	return cur, 0
}

// Start governs GOMAXPROCS from now until ctx ends or stop is called: it sets one processor at
// once, then never more than most (Go's own setting when most is below one). stop waits for the
// governor to end and gives back the setting Start found. changed, when not nil, hears each
// change.
func Start(ctx context.Context, most int, changed func(from, to int)) (stop func()) {
	tick := time.NewTicker(Window)
	end := start(ctx, most, changed, cpuTime, tick.C)
	return func() {
		end()
		tick.Stop()
	}
}

// start is Start with its clock and the process's CPU time given, so that a test can drive them.
func start(ctx context.Context, most int, changed func(from, to int), cpu func() time.Duration, tick <-chan time.Time) (stop func()) {
	found := runtime.GOMAXPROCS(0)
	if most < 1 {
		most = found
	}
	runtime.GOMAXPROCS(1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		govern(ctx, most, changed, cpu, tick)
	}()
	return func() {
		cancel()
		<-done
		runtime.GOMAXPROCS(found)
	}
}

// govern runs the windows, from one processor, until ctx ends.
func govern(ctx context.Context, most int, changed func(from, to int), cpu func() time.Duration, tick <-chan time.Time) {
	cur, calm := 1, 0
	last, lastAt := cpu(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick:
			t := cpu()
			next, c := Step(cur, most, t-last, now.Sub(lastAt), calm)
			last, lastAt, calm = t, now, c
			if next != cur {
				runtime.GOMAXPROCS(next)
				if changed != nil {
					changed(cur, next)
				}
				cur = next
			}
		}
	}
}

// cpuTime is the CPU time the process has taken, its threads' user and system time together.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
