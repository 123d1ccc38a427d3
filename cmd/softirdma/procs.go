package main

import "runtime"

// maxProcs bounds -procs: more than any machine serve is meant for, fewer than would make the
// runtime's per-processor structures a cost of their own.
const maxProcs = 1024

// procsCheck is -procs' check: 0 (Go's own setting) or 1 to maxProcs.
func procsCheck(n int) flagCheck { return intRange("procs", n, 0, maxProcs) }

// setProcs sets how many CPUs serve's goroutines run on at once, unless procs is 0. A
// function's path hands work from goroutine to goroutine (the vfio-user connection's, the
// device's clock, the link's reader), and with a processor idle each handoff to a parked
// goroutine wakes its thread, which spins for work and sleeps again: CPU that VMs keeping the
// machine busy lose. Where CPUs are idle, the goroutines run side by side instead.
// docs/performance.md has both measured; neither wins everywhere, so Go's setting stays the
// default.
func setProcs(procs int) {
	if procs != 0 {
		runtime.GOMAXPROCS(procs)
	}
}
