package engine

import "time"

// Clock is where the engine gets time and timers. Devices never read the wall clock: the
// simulator gives them virtual time, real mode the wall clock.
type Clock interface {
	// Now is the time since the clock's epoch.
	Now() time.Duration
	// AfterFunc runs f after d. In the simulator f runs on the simulator's loop, in order of
	// time and then of scheduling; in real mode on a goroutine of its own.
	AfterFunc(d time.Duration, f func()) Timer
	// Post runs f after d like AfterFunc, but cannot be stopped; the simulator makes it
	// without allocating.
	Post(d time.Duration, f func())
	// NewTimer makes a stopped timer that runs f when it fires; Reset and Stop reuse it, so a
	// timer restarted on every ACK allocates nothing.
	NewTimer(f func()) Timer
}

// Timer is a pending call.
type Timer interface {
	// Stop cancels the call and reports whether it was still pending.
	Stop() bool
	// Reset (re)schedules the call d from now and reports whether it was pending.
	Reset(d time.Duration) bool
}
