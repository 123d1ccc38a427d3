package main

import "runtime"

// maxProcs bounds -procs: more than any machine serve is meant for, fewer than would make the
// runtime's per-processor structures a cost of their own.
const maxProcs = 1024

// procsCheck is -procs' check: 0 (Go's own setting) or 1 to maxProcs.
func procsCheck(n int) flagCheck { return intRange("procs", n, 0, maxProcs) }

// setProcs sets how many CPUs serve's goroutines run on at once when procs is not 0, and
// returns the setting. A device's path is a chain of handoffs (the vfio-user connection's
// goroutine, the device's clock, the link's reader), each waiting on the one before: with more
// processors than devices, a handoff wakes an idle processor's thread, which spins for work and
// sleeps again. On a machine whose CPUs the VMs keep busy, that is CPU the VMs lose, and one
// processor per device serves them faster; where CPUs are idle, the devices' goroutines run side
// by side. docs/performance.md has both measured.
func setProcs(procs int) int {
	if procs != 0 {
		runtime.GOMAXPROCS(procs)
	}
	return runtime.GOMAXPROCS(0)
}
