package engine_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
)

// slowLink carries frames to a peer's Receive after holding each for a while, as a congested
// or slow link (a socket to a busy guest, a pcap on a slow disk) does.
type slowLink struct {
	delay time.Duration
	ch    chan []byte
}

func (l *slowLink) Send(frame []byte) error {
	if l.delay > 0 {
		time.Sleep(l.delay)
	}
	l.ch <- append([]byte(nil), frame...)
	return nil
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
	la, lb := &slowLink{delay: delay, ch: make(chan []byte, 4096)}, &slowLink{ch: make(chan []byte, 4096)}
	devA.Attach(la)
	devB.Attach(lb)
	done := make(chan struct{})
	var wg sync.WaitGroup
	pump := func(l *slowLink, to *engine.Device) {
		defer wg.Done()
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
	go pump(la, devB)
	go pump(lb, devA)

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
