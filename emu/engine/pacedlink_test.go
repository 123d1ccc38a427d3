package engine_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
)

// pacedLink holds each frame for a while before it passes it on, as a fabric port shaped to
// a slow peer holds up its sender, and counts the frames that the goroutine receiving for the
// same device was made to send.
type pacedLink struct {
	delay      time.Duration
	ch         chan []byte
	receiver   atomic.Int64 // the goroutine id of the device's receive loop
	byReceiver atomic.Int64
}

func (l *pacedLink) Send(frame []byte) error {
	if goroutineID() == l.receiver.Load() {
		l.byReceiver.Add(1)
	}
	time.Sleep(l.delay)
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
	// Each device on a clock of its own, as each function of serve is.
	macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	ipA, ipB := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	resolve := func(ip netip.Addr) ([6]byte, bool) {
		if ip == ipA {
			return macA, true
		}
		return macB, true
	}
	devA := engine.NewDevice(engine.DeviceConfig{Name: "A", Clock: realtime.NewWallClock(), MAC: macA, IP: ipA, Resolve: resolve})
	devB := engine.NewDevice(engine.DeviceConfig{Name: "B", Clock: realtime.NewWallClock(), MAC: macB, IP: ipB, Resolve: resolve})
	defer devA.Stop()
	defer devB.Stop()
	la := &pacedLink{delay: 300 * time.Microsecond, ch: make(chan []byte, 8192)}
	lb := &pacedLink{ch: make(chan []byte, 8192)}
	devA.Attach(la)
	devB.Attach(lb)
	done := make(chan struct{})
	var wg sync.WaitGroup
	pump := func(l, mark *pacedLink, to *engine.Device) {
		defer wg.Done()
		if mark != nil {
			mark.receiver.Store(goroutineID())
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
	go pump(la, nil, devB)
	go pump(lb, la, devA)
	defer wg.Wait()
	defer close(done)

	pdA, _ := devA.AllocPD()
	pdB, _ := devB.AllocPD()
	cqA, _ := devA.CreateCQ(64)
	cqB, _ := devB.CreateCQ(64)
	caps := engine.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa, err := pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cqA, RecvCQ: cqA, Cap: caps})
	must(t, err)
	qb, err := pdB.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cqB, RecvCQ: cqB, Cap: caps})
	must(t, err)
	must(t, engine.ConnectRC(qa, qb, engine.ConnectOptions{MTU: engine.MTU1024, Timeout: 18}))
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
	bufA, bufB := make([]byte, msgs*size), make([]byte, msgs*size)
	fill(bufA, 7)
	mrA, err := pdA.RegMR(bufA, engine.AccessLocalWrite)
	must(t, err)
	mrB, err := pdB.RegMR(bufB, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(t, err)
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
