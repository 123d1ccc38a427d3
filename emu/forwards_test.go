package emu_test

import (
	"testing"

	"github.com/softirdma/softirdma/internal/forwards"
)

// TestEveryNameForwarded: every exported name of the engine, the simulator and the real-time host
// is also emu's, so programs written against emu see all of them. A name added there and not in
// engine_names.go, sim_names.go or realtime_names.go fails here.
func TestEveryNameForwarded(t *testing.T) {
	missing, err := forwards.Missing(".", "engine", "sim", "realtime")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range missing {
		t.Errorf("emu does not forward %s", n)
	}
}
