package ethswitch_test

import (
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
	"github.com/softirdma/softirdma/wire/roce"
)

// recvSealed takes one queued frame from p and says whether it came sealed, and whether its
// ICRC holds.
func recvSealed(t *testing.T, p *ethswitch.Port) (sealed, icrcOK bool) {
	t.Helper()
	bufs, sizes, flags := [][]byte{make([]byte, roce.MaxFrameLen)}, make([]int, 1), make([]bool, 1)
	if n, err := p.RecvBatchSealed(bufs, sizes, flags); n != 1 || err != nil {
		t.Fatalf("RecvBatchSealed: %d, %v", n, err)
	}
	var f roce.Frame
	var parser roce.Parser
	return flags[0], parser.Parse(&f, bufs[0][:sizes[0]]) == nil
}

// A frame sent sealed reaches its port sealed only when nothing on the way may have changed
// it: a plan of faults that did not touch it keeps it sealed, one that corrupted it does not,
// and faults that cannot say (no Changer) make every frame unsealed. A frame sent without
// SendSealed is never sealed.
func TestSealedOnlyWhatNothingChanged(t *testing.T) {
	sw := ethswitch.New()
	a, b := sw.NewPort("a"), sw.NewPort("b")
	sendSealed := func(from *ethswitch.Port, src, dst [6]byte, psn uint32, sealed bool) {
		fr := rocev2(t, src, dst, false, roce.RCWriteMiddle, psn, 256)
		buf := from.Buffer()[:len(fr)]
		copy(buf, fr)
		if sealed {
			from.SendSealed(buf)
		} else {
			from.SendBuffer(buf)
		}
	}
	// b's MAC learned, so a's frames go to b alone.
	sendSealed(b, macB, macA, 0, true)
	recvSealed(t, a)

	check := func(name string, psn uint32, viaSealed, wantSealed, wantICRC bool) {
		t.Helper()
		sendSealed(a, macA, macB, psn, viaSealed)
		if sealed, ok := recvSealed(t, b); sealed != wantSealed || ok != wantICRC {
			t.Errorf("%s: sealed %v, ICRC good %v; want %v, %v", name, sealed, ok, wantSealed, wantICRC)
		}
	}
	check("no faults", 1, true, true, true)
	check("SendBuffer", 2, false, false, true)

	plan := &faultplan.Live{}
	sw.SetFaults(plan)
	corrupt, err := faultplan.Parse("corrupt from=a opcode=RDMA_WRITE_MIDDLE nth=2")
	if err != nil {
		t.Fatal(err)
	}
	plan.Add(corrupt)
	check("plan, first match", 3, true, true, true)
	check("plan, corrupted", 4, true, false, false)
	check("plan, after", 5, true, true, true)

	sw.SetFaults(faultsFunc{
		frame: func(string, []byte) (int, time.Duration) { return 1, 0 },
		down:  func(string) bool { return false },
	})
	check("faults without Changer", 6, true, false, true)

	// RecvBatch, for a reader that does not ask, hands the same frames over.
	sw.SetFaults(nil)
	sendSealed(a, macA, macB, 7, true)
	if got := len(recvAll(t, b)); got != 1 {
		t.Fatalf("RecvBatch took %d frames, want 1", got)
	}
}
