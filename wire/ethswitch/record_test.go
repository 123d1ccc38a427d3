package ethswitch_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
	"github.com/softirdma/softirdma/wire/roce"
)

// TestRecordKeepsTheCapturesNumbers: a frame a device hands back to itself (Record) is in the
// capture in the order it came, and the fault plan counts it without touching it, so a fault's
// frame numbers stay the capture's.
func TestRecordKeepsTheCapturesNumbers(t *testing.T) {
	sw := ethswitch.New()
	var seen [][]byte
	sw.SetTap(func(_ string, _ time.Time, f []byte) { seen = append(seen, bytes.Clone(f)) })
	plan := &faultplan.Live{}
	sw.SetFaults(plan)
	a, b := sw.NewPort("a"), sw.NewPort("b")
	drop, err := faultplan.Parse("drop from=a nth=2")
	if err != nil {
		t.Fatal(err)
	}
	plan.Add(drop)
	first := rocev2(t, macA, macB, false, roce.RCSendOnly, 1, 8)
	loop := rocev2(t, macA, macA, false, roce.RCSendOnly, 7, 8)
	second := rocev2(t, macA, macB, false, roce.RCSendOnly, 2, 8)
	if _, err := a.SendBatch([][]byte{first}); err != nil {
		t.Fatal(err)
	}
	sw.Record("a", loop)
	if _, err := a.SendBatch([][]byte{second}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || !bytes.Equal(seen[0], first) || !bytes.Equal(seen[1], loop) || !bytes.Equal(seen[2], second) {
		t.Fatalf("the capture holds %d frames, want the first, the loopback and the second in that order", len(seen))
	}
	e := plan.List()[0]
	if e.Seen != 2 || e.Fired != 1 || !slices.Equal(e.Frames, []uint64{3}) || plan.Frames() != 3 {
		t.Errorf("the drop saw %d, fired %d on frames %v, the plan was shown %d; want 2, 1, [3], 3", e.Seen, e.Fired, e.Frames, plan.Frames())
	}
	if n := b.Queued(); n != 1 {
		t.Errorf("b has %d frames queued, want the first alone (the loopback is a's, the second dropped)", n)
	}
}
