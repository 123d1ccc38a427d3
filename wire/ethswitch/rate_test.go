package ethswitch_test

import (
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/roce"
)

// An uplink with a rate hands its link frames no faster than that rate, loses none however fast
// they come, and holds their sender back meanwhile: 200 frames of 1,000 bytes at 8 Mbit/s take
// at least 200 ms less the burst allowance, and all 200 go out, in order.
func TestRateShapesTheUplink(t *testing.T) {
	left, right := ethswitch.New(), ethswitch.New()
	a := left.NewPort("a")
	far := right.NewPort("far")
	up := left.Uplink("up", right.NewPort("from-left"))
	if err := up.SetRate(8e6); err != nil {
		t.Fatal(err)
	}
	const n, size = 200, 1000 - 24 // 1,000 bytes on the wire each
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = append(frame(9, 1, ""), make([]byte, size-14)...)
		frames[i][14] = byte(i)
	}
	start := time.Now()
	send(t, a, frames...)
	took := time.Since(start)
	if min := n*1000*8*time.Second/8e6 - time.Millisecond; took < min {
		t.Errorf("%d frames at 8 Mbit/s went in %v, under %v", n, took, min)
	}
	bufs, sizes := [][]byte{make([]byte, roce.MaxFrameLen)}, make([]int, 1)
	for i := range n {
		if got, err := far.RecvBatch(bufs, sizes); got != 1 || err != nil || sizes[0] != size || bufs[0][14] != byte(i) {
			t.Fatalf("frame %d: %d %v, %d bytes, number %d", i, got, err, sizes[0], bufs[0][14])
		}
	}
	if c := up.Counters(); c.OutFrames != n || c.Dropped != 0 {
		t.Errorf("uplink counters %+v", c)
	}
	for _, bad := range []float64{-1, ethswitch.MaxRate * 2} {
		if err := up.SetRate(bad); err == nil {
			t.Errorf("SetRate(%g) accepted", bad)
		}
	}
}

// A port's rate holds up only frames handed to that port: a's frames to b, whose port has no
// rate, go at once while c's port is shaped to a crawl.
func TestRateIsThePorts(t *testing.T) {
	sw := ethswitch.New()
	a, b, c := sw.NewPort("a"), sw.NewPort("b"), sw.NewPort("c")
	if err := c.SetRate(1e3); err != nil { // 1 kbit/s: a 38-byte frame takes half a second
		t.Fatal(err)
	}
	send(t, b, frame(1, 2, "b learned"))
	send(t, c, frame(1, 3, "c learned"))
	recvAll(t, a)
	recvAll(t, b) // c's frame, flooded before a was heard
	start := time.Now()
	for range 100 {
		send(t, a, frame(2, 1, "to b"))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("100 frames to an unshaped port took %v", took)
	}
	if got := len(recvAll(t, b)); got != 100 {
		t.Errorf("b got %d frames", got)
	}
}
