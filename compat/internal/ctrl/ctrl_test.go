package ctrl

import (
	"testing"
	"time"
)

// Round shortens what a message prints, and never to 0s for a time that passed: "within 0s"
// reads as if nothing was tried.
func TestRoundNeverZero(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Nanosecond: "1ns", 400 * time.Nanosecond: "400ns", 1234 * time.Nanosecond: "1µs",
		time.Millisecond: "1ms", 1300 * time.Microsecond: "1ms", 4*time.Millisecond + 600*time.Microsecond: "5ms",
		12345 * time.Microsecond: "10ms", 1500 * time.Millisecond: "2s", 10*time.Second + 200*time.Millisecond: "10s",
	} {
		if got := Round(d).String(); got != want {
			t.Errorf("Round(%v) = %s, want %s", d, got, want)
		}
	}
}
