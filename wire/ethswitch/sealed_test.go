package ethswitch_test

import (
	"slices"
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

// SendSealedBatch: the frames of a batch cross as SendSealed would take them one by one. The tap
// sees them in order, the faults see each once (the corrupted one alone arrives unsealed, its
// ICRC broken), the port counts them, a frame dropped by the faults and a nil one are skipped,
// and a closed port takes none.
func TestSendSealedBatch(t *testing.T) {
	sw := ethswitch.New()
	a, b := sw.NewPort("a"), sw.NewPort("b")
	var tapped []uint32
	sw.SetTap(func(_ string, _ time.Time, f []byte) {
		var fr roce.Frame
		var parser roce.Parser
		if parser.ParseHeaders(&fr, f) == nil {
			tapped = append(tapped, fr.BTH.PSN())
		}
	})
	learn := rocev2(t, macB, macA, false, roce.RCWriteMiddle, 100, 64)
	b.SendSealed(append(b.Buffer()[:0], learn...))
	recvSealed(t, a)

	plan := &faultplan.Live{}
	for _, spec := range []string{"corrupt from=a opcode=RDMA_WRITE_MIDDLE nth=2", "drop from=a opcode=RDMA_WRITE_MIDDLE nth=4"} {
		ft, err := faultplan.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		plan.Add(ft)
	}
	sw.SetFaults(plan)
	batch := [][]byte{nil}
	for psn := range uint32(5) {
		fr := rocev2(t, macA, macB, false, roce.RCWriteMiddle, psn, 256)
		batch = append(batch, append(a.Buffer()[:0], fr...))
	}
	before := a.Counters().InFrames
	a.SendSealedBatch(batch)
	if got := a.Counters().InFrames - before; got != 5 {
		t.Errorf("port a counted %d frames in, want 5", got)
	}
	if want := []uint32{100, 0, 1, 2, 3, 4}; !slices.Equal(tapped, want) {
		t.Errorf("tap saw PSNs %v, want %v", tapped, want)
	}
	// PSN 1 corrupted, PSN 3 dropped.
	for _, want := range []struct{ sealed, icrc bool }{{true, true}, {false, false}, {true, true}, {true, true}} {
		if sealed, ok := recvSealed(t, b); sealed != want.sealed || ok != want.icrc {
			t.Errorf("sealed %v, ICRC good %v; want %v, %v", sealed, ok, want.sealed, want.icrc)
		}
	}
	if q := b.Queued(); q != 0 {
		t.Errorf("%d frames left for b, want none", q)
	}

	a.Close()
	a.SendSealedBatch([][]byte{append(a.Buffer()[:0], learn...)})
	if q := b.Queued(); q != 0 {
		t.Errorf("a closed port forwarded %d frames", q)
	}
}
