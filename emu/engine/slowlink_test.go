package engine_test

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
)

// slowLink carries frames to a peer's Receive after holding each for a while, as a congested
// or slow link (a socket to a busy guest, a pcap on a slow disk, a fabric port shaped to a slow
// peer) does. It counts the frames that the receive loop of its own device was made to send.
type slowLink struct {
	delay      time.Duration
	ch         chan []byte
	receiver   atomic.Int64 // the goroutine id of the sending device's receive loop, once known
	byReceiver atomic.Int64
	poster     atomic.Int64 // the goroutine id of a program calling the sending device's verbs
	byPoster   atomic.Int64
}

func (l *slowLink) Send(frame []byte) error {
	if id := l.receiver.Load(); id != 0 && goroutineID() == id {
		l.byReceiver.Add(1)
	}
	if id := l.poster.Load(); id != 0 && goroutineID() == id {
		l.byPoster.Add(1)
	}
	if l.delay > 0 {
		time.Sleep(l.delay)
	}
	l.ch <- append([]byte(nil), frame...)
	return nil
}

// goroutineID is the calling goroutine's number, from its stack's first line.
func goroutineID() int64 {
	var b [64]byte
	s := strings.TrimPrefix(string(b[:runtime.Stack(b[:], false)]), "goroutine ")
	id, _ := strconv.ParseInt(s[:strings.IndexByte(s, ' ')], 10, 64)
	return id
}

// pumpLinks joins two devices by slow links until done closes: what a's link la carries goes
// to b's Receive, and lb's to a's. la learns which goroutine is a's receive loop.
func pumpLinks(wg *sync.WaitGroup, done <-chan struct{}, a, b *engine.Device, la, lb *slowLink) {
	a.Attach(la)
	b.Attach(lb)
	pump := func(l *slowLink, to *engine.Device, own *slowLink) {
		defer wg.Done()
		if own != nil {
			own.receiver.Store(goroutineID())
		}
		for {
			select {
			case f := <-l.ch:
				to.Receive(f)
			case <-done:
				return
			}
		}
	}
	wg.Add(2)
	go pump(la, b, nil)
	go pump(lb, a, la)
}

// BenchmarkPostBesideSlowLink measures ibv_post_recv on one QP while another QP of the same
// device streams 64 KiB WRITEs into a link that takes linkDelay per frame. The device sends
// frames after releasing its lock, so the post costs the same whatever the link's speed: the
// sub-benchmarks' ns/op should be close to each other (and p99-us far below the 1.6 ms the link
// takes for one requester run of 16 frames).
func BenchmarkPostBesideSlowLink(b *testing.B) {
	for _, delay := range []time.Duration{0, 100 * time.Microsecond} {
		b.Run(fmt.Sprintf("link=%v", delay), func(b *testing.B) { benchPostBesideLink(b, delay) })
	}
}

func benchPostBesideLink(b *testing.B, delay time.Duration) {
	devA, devB := wallDevices()
	done := make(chan struct{})
	var wg sync.WaitGroup
	pumpLinks(&wg, done, devA, devB, &slowLink{delay: delay, ch: make(chan []byte, 4096)}, &slowLink{ch: make(chan []byte, 4096)})

	pdA, _ := devA.AllocPD()
	pdB, _ := devB.AllocPD()
	const rqDepth = 1 << 12
	caps := engine.QPCap{MaxSendWR: 64, MaxRecvWR: rqDepth, MaxSendSGE: 1, MaxRecvSGE: 1}
	cq1, _ := devA.CreateCQ(1024)
	cq2, _ := devA.CreateCQ(2 * rqDepth)
	cqB, _ := devB.CreateCQ(1024)
	mkQP := func(pd *engine.PD, cq *engine.CQ) *engine.QP {
		qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: caps})
		must(b, err)
		return qp
	}
	q1, q1b := mkQP(pdA, cq1), mkQP(pdB, cqB)
	q2, q2b := mkQP(pdA, cq2), mkQP(pdB, cqB)
	opts := engine.ConnectOptions{MTU: engine.MTU4096, Timeout: 18}
	must(b, engine.ConnectRC(q1, q1b, opts))
	must(b, engine.ConnectRC(q2, q2b, opts))
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	mrA, err := pdA.RegMR(bufA, engine.AccessLocalWrite)
	must(b, err)
	mrB, err := pdB.RegMR(bufB, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(b, err)

	// The stream: 64 KiB WRITEs on q1, four outstanding, for as long as the benchmark runs.
	completed := make(chan struct{}, 1)
	cq1.OnCompletion(func() {
		select {
		case completed <- struct{}{}:
		default:
		}
	})
	wr := engine.SendWR{Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(mrA, 0, 64<<10), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 4; i++ {
			_ = q1.PostSend(wr)
		}
		wc := make([]engine.WC, 16)
		for {
			select {
			case <-completed:
			case <-done:
				return
			}
			for n := cq1.Poll(wc); n > 0; n = cq1.Poll(wc) {
				for range n {
					_ = q1.PostSend(wr)
				}
			}
		}
	}()
	// Let the stream fill the link before measuring.
	for devA.Stats().TxFrames < 64 {
		time.Sleep(time.Millisecond)
	}

	rwr := engine.RecvWR{SGL: sge(mrA, 0, 8)}
	wc := make([]engine.WC, 256)
	posted := 0
	lat := make([]time.Duration, 0, 1<<20)
	for b.Loop() {
		if posted == rqDepth {
			// Flush the receive queue into the CQ and start over, outside the measurement.
			b.StopTimer()
			must(b, q2.Modify(engine.QPAttr{State: engine.QPSErr}, engine.AttrState))
			for cq2.Poll(wc) > 0 {
			}
			must(b, q2.Modify(engine.QPAttr{State: engine.QPSReset}, engine.AttrState))
			must(b, q2.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags))
			posted = 0
			b.StartTimer()
		}
		start := time.Now()
		if err := q2.PostRecv(rwr); err != nil {
			b.Fatal(err)
		}
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
		posted++
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100])/float64(time.Microsecond), "p99-us")
	b.ReportMetric(float64(lat[len(lat)-1])/float64(time.Microsecond), "max-us")
	b.ReportMetric(float64(devA.Stats().TxFrames), "frames")
	close(done)
	devA.Stop()
	devB.Stop()
	wg.Wait()
}

// pacedPair is two wall-clock devices joined by slow links, A's (la) holding each frame 300 us,
// with a connected RC pair qa and qb (MTU 1024) on CQs of 64 entries.
type pacedPair struct {
	devA, devB *engine.Device
	la         *slowLink
	pdA, pdB   *engine.PD
	cqA, cqB   *engine.CQ
	qa, qb     *engine.QP
	caps       engine.QPCap
}

// newPacedPair makes a pacedPair, running setup (if not nil) before the links carry anything;
// the test's cleanup stops the links, then the devices.
func newPacedPair(t *testing.T, setup func(*pacedPair)) *pacedPair {
	p := &pacedPair{la: &slowLink{delay: 300 * time.Microsecond, ch: make(chan []byte, 8192)},
		caps: engine.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}}
	p.devA, p.devB = wallDevicesOn(realtime.NewWallClock(), realtime.NewWallClock())
	t.Cleanup(p.devA.Stop)
	t.Cleanup(p.devB.Stop)
	if setup != nil {
		setup(p)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	pumpLinks(&wg, done, p.devA, p.devB, p.la, &slowLink{ch: make(chan []byte, 8192)})
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { close(done) })
	p.pdA, _ = p.devA.AllocPD()
	p.pdB, _ = p.devB.AllocPD()
	p.cqA, _ = p.devA.CreateCQ(64)
	p.cqB, _ = p.devB.CreateCQ(64)
	var err error
	p.qa, err = p.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqA, RecvCQ: p.cqA, Cap: p.caps})
	must(t, err)
	p.qb, err = p.pdB.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqB, RecvCQ: p.cqB, Cap: p.caps})
	must(t, err)
	must(t, engine.ConnectRC(p.qa, p.qb, engine.ConnectOptions{MTU: engine.MTU1024, Timeout: 18}))
	return p
}

// buffers registers n bytes filled from seed on A for reading and n zero bytes on B for WRITEs.
func (p *pacedPair) buffers(t *testing.T, n int, seed byte) (bufA, bufB []byte, mrA, mrB *engine.MR) {
	bufA, bufB = make([]byte, n), make([]byte, n)
	fill(bufA, seed)
	mrA, err := p.pdA.RegMR(bufA, engine.AccessLocalWrite)
	must(t, err)
	mrB, err = p.pdB.RegMR(bufB, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(t, err)
	return bufA, bufB, mrA, mrB
}

// TestPacedLinkKeepsNoACKWaiting streams WRITEs from A over a link that holds each frame
// 300 us, while A's receive loop takes B's ACKs and B's ping-pong of SENDs (which A
// acknowledges), and A's send CQ has a completion handler (so each ACK that completes a WRITE
// leaves work in the outbox for whoever empties it). The
// goroutine that receives must never be the one that waits on the link: when it was, it carried
// out the requester's frames for rounds on end while ACKs queued behind it, the ACK timer ran
// out and the resent frames kept it busier still, until the retries were spent (a VM writing
// through a fabric port shaped to a guest under TCG). Every WRITE completes, its bytes land, and
// the receive loop sent nothing.
func TestPacedLinkKeepsNoACKWaiting(t *testing.T) {
	p := newPacedPair(t, nil)
	devA, pdA, pdB, cqA, cqB, qa, caps, la := p.devA, p.pdA, p.pdB, p.cqA, p.cqB, p.qa, p.caps, p.la
	// B also SENDs to A on a second pair, so A's receive loop has ACKs of its own to send.
	cqA2, _ := devA.CreateCQ(64)
	qa2, err := pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cqA2, RecvCQ: cqA2, Cap: caps})
	must(t, err)
	qb2, err := pdB.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cqB, RecvCQ: cqB, Cap: caps})
	must(t, err)
	must(t, engine.ConnectRC(qb2, qa2, engine.ConnectOptions{MTU: engine.MTU1024, Timeout: 18}))
	completed := make(chan struct{}, 1)
	cqA.OnCompletion(func() {
		select {
		case completed <- struct{}{}:
		default:
		}
	})

	const msgs, size = 16, 64 << 10
	bufA, bufB, mrA, mrB := p.buffers(t, msgs*size, 7)
	for i := range msgs {
		off := uint64(i * size)
		must(t, qa.PostSend(engine.SendWR{ID: uint64(i), Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled,
			SGL: sge(mrA, off, size), RemoteAddr: mrB.Addr() + off, RKey: mrB.RKey()}))
	}
	const sends = 32
	small, into := make([]byte, sends*64), make([]byte, sends*64)
	fill(small, 3)
	mrSmall, err := pdB.RegMR(small, engine.AccessLocalWrite)
	must(t, err)
	mrInto, err := pdA.RegMR(into, engine.AccessLocalWrite)
	must(t, err)
	for i := range sends {
		must(t, qa2.PostRecv(engine.RecvWR{ID: uint64(i), SGL: sge(mrInto, uint64(i*64), 64)}))
	}
	// B's SENDs go one at a time, each after the last completed, as a ping-pong does: during
	// A's stream and after it.
	pingpong := make(chan error, 1)
	go func() {
		wc := make([]engine.WC, 1)
		for i := range sends {
			if err := qb2.PostSend(engine.SendWR{ID: uint64(i), Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(mrSmall, uint64(i*64), 64)}); err != nil {
				pingpong <- err
				return
			}
			waitCQ(cqB, time.Now().Add(time.Minute))
			if cqB.Poll(wc) != 1 || wc[0].Status != engine.WCSuccess {
				pingpong <- fmt.Errorf("SEND %d from B: %+v", i, wc[0])
				return
			}
		}
		pingpong <- nil
	}()
	wc := make([]engine.WC, msgs)
	got := 0
	deadline := time.After(2 * time.Minute)
	for got < msgs {
		select {
		case <-completed:
		case <-deadline:
			t.Fatalf("%d of %d WRITEs completed; A's stats %+v", got, msgs, devA.Stats())
		}
		for n := cqA.Poll(wc[got:]); n > 0; n = cqA.Poll(wc[got:]) {
			got += n
		}
	}
	for i, c := range wc {
		if c.Status != engine.WCSuccess || c.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v, want WRITE %d with status success", i, c, i)
		}
	}
	if !bytes.Equal(bufA, bufB) {
		t.Fatal("B's buffer does not hold what A wrote")
	}
	if err := <-pingpong; err != nil {
		t.Fatal(err)
	}
	for got := 0; got < sends; {
		waitCQ(cqA2, time.Now().Add(time.Minute))
		n := cqA2.Poll(wc)
		if n == 0 {
			t.Fatalf("%d of %d SENDs from B arrived", got, sends)
		}
		for _, c := range wc[:n] {
			if c.Status != engine.WCSuccess || c.WRID != uint64(got) {
				t.Fatalf("receive %d: %+v, want %d with status success", got, c, got)
			}
			got++
		}
	}
	if !bytes.Equal(small, into) {
		t.Fatal("A's receive buffer does not hold what B sent")
	}
	if n := la.byReceiver.Load(); n != 0 {
		t.Errorf("A's receive loop sent %d of A's frames, waiting on the link in the requester's place", n)
	}
}

// TestPacedLinkLeavesVerbsFree has a program post 64 KiB WRITEs, one more as each completes,
// poll A's CQ and send netdev frames, while A's link holds each frame 300 us. No verb may carry
// frames out on its caller's goroutine: a caller may be the loop that answers a VM's register
// reads, and a WRITE of 128 x 64 KiB to a port paced at 12 Mbit/s once held such a loop for
// 5.6 s, past QEMU's reply timeout, and QEMU dropped the function. Every WRITE completes and its
// bytes land, every netdev frame reaches B in order, and the program's goroutine sent nothing.
func TestPacedLinkLeavesVerbsFree(t *testing.T) {
	others := make(chan []byte, 64)
	p := newPacedPair(t, func(p *pacedPair) {
		p.la.poster.Store(goroutineID())
		p.devB.OnOtherFrame(func(f []byte) { others <- f })
	})
	devA, cqA, qa, la := p.devA, p.cqA, p.qa, p.la

	const msgs, inFlight, size = 24, 4, 64 << 10
	bufA, bufB, mrA, mrB := p.buffers(t, msgs*size, 11)
	// A frame for B's Ethernet side (OnOtherFrame): broadcast, an EtherType RoCE does not use.
	other := func(i int) []byte {
		f := make([]byte, 60)
		copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5})
		f[14] = byte(i)
		return f
	}
	post := func(i int) {
		off := uint64(i * size)
		must(t, qa.PostSend(engine.SendWR{ID: uint64(i), Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled,
			SGL: sge(mrA, off, size), RemoteAddr: mrB.Addr() + off, RKey: mrB.RKey()}))
		devA.SendFrame(other(i))
	}
	posted := 0
	for ; posted < inFlight; posted++ {
		post(posted)
	}
	wc := make([]engine.WC, msgs)
	for got := 0; got < msgs; {
		waitCQ(cqA, time.Now().Add(2*time.Minute))
		n := cqA.Poll(wc[got:])
		if n == 0 {
			t.Fatalf("%d of %d WRITEs completed; A's stats %+v", got, msgs, devA.Stats())
		}
		for _, c := range wc[got : got+n] {
			if c.Status != engine.WCSuccess || c.WRID != uint64(got) {
				t.Fatalf("completion %d: %+v, want WRITE %d with status success", got, c, got)
			}
			got++
		}
		for ; posted < msgs && posted < got+inFlight; posted++ {
			post(posted)
		}
	}
	if !bytes.Equal(bufA, bufB) {
		t.Fatal("B's buffer does not hold what A wrote")
	}
	for i := range msgs {
		if f := <-others; !bytes.Equal(f, other(i)) {
			t.Fatalf("netdev frame %d reached B as % x", i, f[:16])
		}
	}
	if n := la.byPoster.Load(); n != 0 {
		t.Errorf("the program's goroutine sent %d of A's frames, waiting on the link in its verbs", n)
	}
}
