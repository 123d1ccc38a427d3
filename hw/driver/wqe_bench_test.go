package driver_test

import (
	"testing"

	"github.com/softirdma/softirdma/internal/devscenario"
)

// BenchmarkWQEsPerSecond is batches of signaled 8-byte WRITEs posted by the Go driver through
// the in-process transport to the other QP of a loopback pair: each batch written into guest
// RAM and rung with one doorbell (a vfio-user REGION_WRITE), its completions polled in the
// guest's CQ ring. WQEs/s is the rate the function takes small work requests at when a batch
// shares a doorbell. BenchmarkQEMUWQEsPerSecond of hw/qtest is the same through QEMU.
func BenchmarkWQEsPerSecond(b *testing.B) {
	devscenario.WQERate(b, benchPair)
}
