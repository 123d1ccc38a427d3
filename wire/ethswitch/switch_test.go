package ethswitch_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/roce"
)

// frame is an Ethernet frame from MAC 02:00:00:00:00:src to 02:00:00:00:00:dst (dst 0xff: the
// broadcast address) carrying tag (an IPv4 EtherType, a payload).
func frame(dst, src byte, tag string) []byte {
	f := []byte{2, 0, 0, 0, 0, dst, 2, 0, 0, 0, 0, src, 0x08, 0x00}
	if dst == 0xff {
		copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	return append(f, tag...)
}

// recvAll takes what is queued for p without blocking (what SendBatch delivers is queued before
// it returns).
func recvAll(t *testing.T, p *ethswitch.Port) []string {
	t.Helper()
	var got []string
	bufs := [][]byte{make([]byte, roce.MaxFrameLen)}
	sizes := make([]int, 1)
	for p.Queued() > 0 {
		n, err := p.RecvBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got = append(got, string(bufs[i][14:sizes[i]]))
		}
	}
	return got
}

func send(t *testing.T, p *ethswitch.Port, frames ...[]byte) {
	t.Helper()
	if n, err := p.SendBatch(frames); n != len(frames) || err != nil {
		t.Fatalf("SendBatch: %d, %v", n, err)
	}
}

// Forwarding: a MAC not yet seen and a broadcast go to every other port, a learned MAC only to
// its port, nothing back to the sender; the tap sees each frame once, with its port's name.
func TestForwarding(t *testing.T) {
	sw := ethswitch.New()
	var mu sync.Mutex
	var tapped []string
	sw.SetTap(func(src string, _ time.Time, f []byte) {
		mu.Lock()
		tapped = append(tapped, src+":"+string(f[14:]))
		mu.Unlock()
	})
	a, b, c := sw.NewPort("a"), sw.NewPort("b"), sw.NewPort("c")
	send(t, a, frame(2, 1, "a->b unknown"))
	send(t, b, frame(1, 2, "b->a learned"))
	send(t, a, frame(2, 1, "a->b learned"))
	send(t, c, frame(0xff, 3, "c broadcast"))
	for _, tc := range []struct {
		p    *ethswitch.Port
		want []string
	}{
		{a, []string{"b->a learned", "c broadcast"}},
		{b, []string{"a->b unknown", "a->b learned", "c broadcast"}},
		{c, []string{"a->b unknown"}},
	} {
		if got := recvAll(t, tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("port %s got %q, want %q", tc.p.Name(), got, tc.want)
		}
	}
	want := []string{"a:a->b unknown", "b:b->a learned", "a:a->b learned", "c:c broadcast"}
	if !slices.Equal(tapped, want) {
		t.Errorf("tap saw %q, want %q", tapped, want)
	}
	// A runt is not forwarded.
	send(t, a, []byte{1, 2, 3})
	if b.Queued() != 0 || c.Queued() != 0 {
		t.Error("a 3-byte frame was forwarded")
	}
}

// A port whose reader does not keep up loses what exceeds its queue, counted; the others do
// not notice.
func TestFullQueueDrops(t *testing.T) {
	sw := ethswitch.New()
	a, b := sw.NewPort("a"), sw.NewPort("b")
	send(t, b, frame(1, 2, "learn b"))
	recvAll(t, a)
	for i := range ethswitch.QueueFrames + 5 {
		send(t, a, frame(2, 1, fmt.Sprint(i)))
	}
	if _, dropped := b.Stats(); dropped != 5 {
		t.Fatalf("dropped %d, want 5", dropped)
	}
	got := recvAll(t, b)
	if len(got) != ethswitch.QueueFrames || got[0] != "0" || got[len(got)-1] != fmt.Sprint(ethswitch.QueueFrames-1) {
		t.Fatalf("received %d frames, first %q last %q", len(got), got[0], got[len(got)-1])
	}
	st, _ := b.Stats()
	if st.RxFrames != ethswitch.QueueFrames {
		t.Fatalf("stats %+v", st)
	}
	// From the switch's side: what a sent came in, what b's reader took went out, the rest
	// dropped; frames are 14 bytes of header and their tag.
	var sent uint64
	for i := range ethswitch.QueueFrames + 5 {
		sent += uint64(14 + len(fmt.Sprint(i)))
	}
	if got, want := a.Counters(), (ethswitch.Counters{InFrames: ethswitch.QueueFrames + 5, InBytes: sent, OutFrames: 1, OutBytes: 14 + 7}); got != want {
		t.Errorf("a's counters %+v, want %+v", got, want)
	}
	if got := b.Counters(); got.InFrames != 1 || got.OutFrames != ethswitch.QueueFrames || got.Dropped != 5 || got.Queued != 0 {
		t.Errorf("b's counters %+v", got)
	}
	// A frame longer than the reader's buffer is dropped at the reader, counted with the rest.
	send(t, a, frame(2, 1, "too long for 20 bytes"))
	if b.Counters().Queued != 1 {
		t.Fatalf("b's counters %+v", b.Counters())
	}
	if n, err := b.RecvBatch([][]byte{make([]byte, 20)}, make([]int, 1)); n != 0 || err != nil {
		t.Fatalf("RecvBatch into a short buffer: %d %v", n, err)
	}
	if got := b.Counters(); got.Dropped != 6 || got.Queued != 0 {
		t.Errorf("b's counters %+v", got)
	}
	if ports := sw.Ports(); len(ports) != 2 || ports[0] != a || ports[1] != b {
		t.Errorf("Ports: %v", ports)
	}
}

// Closing a port wakes its blocked reader with ErrClosed and the switch forgets its MACs:
// frames for them flood again, to the ports still there.
func TestClose(t *testing.T) {
	sw := ethswitch.New()
	a, b, c := sw.NewPort("a"), sw.NewPort("b"), sw.NewPort("c")
	send(t, b, frame(1, 2, "learn b"))
	recvAll(t, a)
	recvAll(t, c)
	errc := make(chan error, 1)
	go func() {
		_, err := b.RecvBatch([][]byte{make([]byte, 64)}, make([]int, 1))
		errc <- err
	}()
	closeEnds(t, b, errc, "blocked RecvBatch", "RecvBatch still blocked after Close")
	send(t, a, frame(2, 1, "to gone b"))
	if got := recvAll(t, c); !slices.Equal(got, []string{"to gone b"}) {
		t.Fatalf("c got %q", got)
	}
	if _, err := b.SendBatch([][]byte{frame(1, 2, "x")}); !errors.Is(err, ethswitch.ErrClosed) {
		t.Fatalf("SendBatch on a closed port: %v", err)
	}
}

// Two switches joined by an uplink (one's port as the other's link): a frame crosses and the
// answer comes back to the port that sent first.
func TestUplink(t *testing.T) {
	left, right := ethswitch.New(), ethswitch.New()
	a := left.NewPort("a")
	b := right.NewPort("b")
	up := left.Uplink("up", right.NewPort("from-left"))
	done := make(chan error, 1)
	go func() { done <- up.Run() }()
	send(t, a, frame(2, 1, "over the uplink"))
	bufs, sizes := [][]byte{make([]byte, roce.MaxFrameLen)}, make([]int, 1)
	if n, err := b.RecvBatch(bufs, sizes); n != 1 || err != nil || string(bufs[0][14:sizes[0]]) != "over the uplink" {
		t.Fatalf("b: %d %v", n, err)
	}
	send(t, b, frame(1, 2, "and back"))
	if n, err := a.RecvBatch(bufs, sizes); n != 1 || err != nil || string(bufs[0][14:sizes[0]]) != "and back" {
		t.Fatalf("a: %d %v", n, err)
	}
	st, _ := up.Stats()
	if st.TxFrames != 1 || st.RxFrames != 1 {
		t.Fatalf("uplink stats %+v", st)
	}
	// The uplink's counters are the switch's view: "and back" came in from the link, "over
	// the uplink" went out on it.
	if got, want := up.Counters(), (ethswitch.Counters{InFrames: 1, InBytes: 14 + 8, OutFrames: 1, OutBytes: 14 + 15}); got != want {
		t.Errorf("uplink counters %+v, want %+v", got, want)
	}
	if ports := left.Ports(); len(ports) != 2 || ports[0] != a || ports[1] != up {
		t.Errorf("Ports: %v", ports)
	}
	closeEnds(t, up, done, "Run", "Run still running after Close")
}

// closeEnds closes c and waits for what was blocked on it to end with ErrClosed, reported on
// ended; what failed names it as what, a wait past ten seconds fails with stuck.
func closeEnds(t *testing.T, c io.Closer, ended <-chan error, what, stuck string) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, ethswitch.ErrClosed) {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(stuck)
	}
}

// Property: whatever the ports send, one frame or a batch at a time, each unicast frame reaches
// exactly the port that last sent from its destination MAC (or, for a MAC not yet heard, every
// other port), each broadcast every other port, in the order they were sent, whole.
func TestForwardingProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(2, 5).Draw(rt, "ports")
		sw := ethswitch.New()
		ports := make([]*ethswitch.Port, n)
		for i := range ports {
			ports[i] = sw.NewPort(fmt.Sprint(i))
		}
		owner := map[byte]int{} // MAC byte -> the port that last sent from it
		want := make([][]string, n)
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for s := range steps {
			// A batch of frames from one port: copied from the sender's buffers (SendBatch) or
			// built in the switch's and handed over sealed (SendSealedBatch).
			from := rapid.IntRange(0, n-1).Draw(rt, "from")
			sealed := rapid.Bool().Draw(rt, "sealed")
			var batch [][]byte
			for b := range rapid.IntRange(1, 40).Draw(rt, "batch") {
				srcMAC := byte(rapid.IntRange(1, 6).Draw(rt, "src"))
				dstMAC := byte(rapid.SampledFrom([]int{1, 2, 3, 4, 5, 6, 0xff}).Draw(rt, "dst"))
				tag := fmt.Sprintf("%d.%d:%s", s, b, rapid.StringN(0, 20, -1).Draw(rt, "payload"))
				owner[srcMAC] = from
				if o, ok := owner[dstMAC]; ok && dstMAC != 0xff {
					if o != from {
						want[o] = append(want[o], tag)
					}
				} else {
					for i := range n {
						if i != from {
							want[i] = append(want[i], tag)
						}
					}
				}
				f := frame(dstMAC, srcMAC, tag)
				if sealed {
					f = append(ports[from].Buffer()[:0], f...)
				}
				batch = append(batch, f)
			}
			if sealed {
				ports[from].SendSealedBatch(batch)
			} else if k, err := ports[from].SendBatch(batch); k != len(batch) || err != nil {
				rt.Fatalf("send: %d %v", k, err)
			}
		}
		for i, p := range ports {
			var got []string
			bufs, sizes := [][]byte{make([]byte, roce.MaxFrameLen)}, make([]int, 1)
			for p.Queued() > 0 {
				k, err := p.RecvBatch(bufs, sizes)
				if err != nil {
					rt.Fatal(err)
				}
				for j := range k {
					if !bytes.Equal(bufs[j][12:14], []byte{8, 0}) {
						rt.Fatalf("port %d: frame changed: % x", i, bufs[j][:sizes[j]])
					}
					got = append(got, string(bufs[j][14:sizes[j]]))
				}
			}
			if !slices.Equal(got, want[i]) {
				rt.Fatalf("port %d got %q, want %q", i, got, want[i])
			}
		}
	})
}

// faultsFunc is Faults from two functions.
type faultsFunc struct {
	frame func(src string, f []byte) (int, time.Duration)
	down  func(port string) bool
}

func (x faultsFunc) Frame(src string, f []byte) (int, time.Duration) { return x.frame(src, f) }
func (x faultsFunc) Down(port string) bool                           { return x.down(port) }

// Faults: a drop, a duplicate, a delay and a corruption of the sender's frame (its own buffer
// untouched), a port whose link is down getting nothing; the tap sees each frame once, the
// dropped one too.
func TestFaults(t *testing.T) {
	sw := ethswitch.New()
	var tapped []string
	sw.SetTap(func(_ string, _ time.Time, f []byte) { tapped = append(tapped, string(f[14:])) })
	a, b, c := sw.NewPort("a"), sw.NewPort("b"), sw.NewPort("c")
	send(t, b, frame(1, 2, "learn b"))
	send(t, c, frame(1, 3, "learn c"))
	recvAll(t, a)
	recvAll(t, b)
	recvAll(t, c)
	sw.SetFaults(faultsFunc{
		frame: func(_ string, f []byte) (int, time.Duration) {
			switch string(f[14:]) {
			case "drop":
				return 0, 0
			case "dup":
				return 2, 0
			case "late":
				return 1, 30 * time.Millisecond
			case "flip":
				f[14] = 'F'
			}
			return 1, 0
		},
		down: func(port string) bool { return port == "c" },
	})
	mine := frame(2, 1, "flip")
	send(t, a, frame(2, 1, "drop"), frame(2, 1, "dup"), mine, frame(3, 1, "to c, down"))
	send(t, a, frame(2, 1, "late"))
	if got := recvAll(t, b); !slices.Equal(got, []string{"dup", "dup", "Flip"}) {
		t.Fatalf("b got %q", got)
	}
	if string(mine[14:]) != "flip" {
		t.Fatal("the fault changed the sender's own buffer")
	}
	bufs, sizes := [][]byte{make([]byte, roce.MaxFrameLen)}, make([]int, 1)
	if n, err := b.RecvBatch(bufs, sizes); n != 1 || err != nil || string(bufs[0][14:sizes[0]]) != "late" {
		t.Fatalf("the delayed frame: %d %v", n, err)
	}
	if c.Queued() != 0 {
		t.Fatal("a port whose link is down got a frame")
	}
	want := []string{"learn b", "learn c", "drop", "dup", "Flip", "to c, down", "late"}
	if !slices.Equal(tapped, want) {
		t.Fatalf("tap saw %q, want %q", tapped, want)
	}
}

// Handing frames over: a frame's buffer takes the place of the caller's (once the sender's
// frame was copied as it was queued, never again), the port keeps nothing it handed over, and a
// caller's buffer it took carries later frames intact; a buffer shorter than the port's gets a
// copy.
func TestRecvBatchHandsOver(t *testing.T) {
	sw := ethswitch.New()
	a, b := sw.NewPort("a"), sw.NewPort("b")
	sent := frame(2, 1, "first")
	send(t, a, sent)
	copy(sent[14:], "XXXXX") // the sender's buffer is its own again
	mine := make([]byte, roce.MaxFrameLen)
	bufs, sizes := [][]byte{mine}, make([]int, 1)
	if n, err := b.RecvBatch(bufs, sizes); n != 1 || err != nil || string(bufs[0][14:sizes[0]]) != "first" {
		t.Fatalf("RecvBatch: %d %v %q", n, err, bufs[0][:sizes[0]])
	}
	if &bufs[0][0] == &mine[0] || len(bufs[0]) != roce.MaxFrameLen {
		t.Fatalf("the frame was copied into the caller's buffer (len %d), not handed over", len(bufs[0]))
	}
	held := bufs[0]
	// The caller's own buffer now carries the port's next frames; what it holds stays.
	for i := range 3 {
		send(t, a, frame(2, 1, fmt.Sprintf("next %d", i)))
		other := [][]byte{make([]byte, roce.MaxFrameLen)}
		if n, err := b.RecvBatch(other, sizes); n != 1 || err != nil || string(other[0][14:sizes[0]]) != fmt.Sprintf("next %d", i) {
			t.Fatalf("RecvBatch %d: %d %v %q", i, n, err, other[0][:sizes[0]])
		}
	}
	if string(held[14:19]) != "first" {
		t.Fatalf("a buffer handed over changed: %q", held[:19])
	}
	send(t, a, frame(2, 1, "short"))
	small := make([]byte, 64)
	bufs = [][]byte{small}
	if n, err := b.RecvBatch(bufs, sizes); n != 1 || err != nil || &bufs[0][0] != &small[0] || string(small[14:sizes[0]]) != "short" {
		t.Fatalf("into a short buffer: %d %v %q", n, err, small[:sizes[0]])
	}
}

// Lent buffers: a frame built in a buffer from Buffer reaches its one port in that very
// buffer; a flood gives each other port a buffer of its own; a duplicate fault's two copies
// are two buffers (a reader changing one leaves the other as it came).
func TestSendBufferHandsOverWithoutCopy(t *testing.T) {
	sw := ethswitch.New()
	a, b, c := sw.NewPort("a"), sw.NewPort("b"), sw.NewPort("c")
	send(t, b, frame(1, 2, "b is here")) // the switch learns b's MAC; a and c get the flood
	recvAll(t, a)
	recvAll(t, c)

	lent := a.Buffer()
	if len(lent) != roce.MaxFrameLen {
		t.Fatalf("Buffer: %d bytes, want %d", len(lent), roce.MaxFrameLen)
	}
	f := lent[:copy(lent, frame(2, 1, "unicast"))]
	a.SendBuffer(f)
	bufs, sizes := [][]byte{make([]byte, roce.MaxFrameLen)}, make([]int, 1)
	if n, err := b.RecvBatch(bufs, sizes); n != 1 || err != nil || string(bufs[0][14:sizes[0]]) != "unicast" {
		t.Fatalf("RecvBatch: %d %v %q", n, err, bufs[0][:sizes[0]])
	}
	if &bufs[0][0] != &lent[0] {
		t.Fatal("the frame built in a lent buffer was copied on its way to its one port")
	}
	if c.Queued() != 0 {
		t.Fatalf("c got %d frames of a unicast to b", c.Queued())
	}

	flood := b.Buffer()
	b.SendBuffer(flood[:copy(flood, frame(0xff, 2, "everyone"))])
	ga, gc := [][]byte{make([]byte, roce.MaxFrameLen)}, [][]byte{make([]byte, roce.MaxFrameLen)}
	if n, _ := a.RecvBatch(ga, sizes); n != 1 || string(ga[0][14:sizes[0]]) != "everyone" {
		t.Fatalf("a: %q", ga[0][:sizes[0]])
	}
	if n, _ := c.RecvBatch(gc, sizes); n != 1 || string(gc[0][14:sizes[0]]) != "everyone" {
		t.Fatalf("c: %q", gc[0][:sizes[0]])
	}
	if &ga[0][0] == &gc[0][0] {
		t.Fatal("two ports got one buffer of a flood")
	}

	sw.SetFaults(faultsFunc{
		frame: func(string, []byte) (int, time.Duration) { return 2, 0 },
		down:  func(string) bool { return false },
	})
	dup := a.Buffer()
	a.SendBuffer(dup[:copy(dup, frame(2, 1, "twice"))])
	two := [][]byte{make([]byte, roce.MaxFrameLen), make([]byte, roce.MaxFrameLen)}
	two2 := make([]int, 2)
	if n, err := b.RecvBatch(two, two2); n != 2 || err != nil {
		t.Fatalf("duplicate: %d frames, %v", n, err)
	}
	copy(two[0][14:], "XXXXX")
	if &two[0][0] == &two[1][0] || string(two[1][14:two2[1]]) != "twice" {
		t.Fatalf("a duplicate's copies share a buffer: %q", two[1][:two2[1]])
	}
	a.SendBuffer(nil) // an unused buffer back: nothing is sent
	if b.Queued() != 0 || c.Queued() != 0 {
		t.Fatal("SendBuffer(nil) sent a frame")
	}
}
