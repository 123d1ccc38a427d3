package engine_test

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/wire/ethswitch"
)

// switchedHosts are two wall-clock hosts on one in-process switch, as two functions of
// `softirdma serve` are, with an RC connection between them.
type switchedHosts struct {
	qa, qb     *engine.QP
	cqA, cqB   *engine.CQ
	mrA, mrB   *engine.MR
	bufA, bufB []byte
	ha, hb     *realtime.Host
}

func newSwitchedHosts(b *testing.B, size int) *switchedHosts {
	s := &switchedHosts{}
	s.ha, s.hb = hostsOn(b, ethswitch.New())
	var pdA, pdB *engine.PD
	pdA, pdB, s.cqA, s.cqB, s.qa, s.qb = qpPair(b, s.ha.Device(), s.hb.Device(), 16)
	connect(b, s.qa, s.qb, s.hb.Device().IP(), s.ha.Device().IP())
	s.bufA, s.bufB = make([]byte, size), make([]byte, size)
	var err error
	s.mrA, err = pdA.RegMR(s.bufA, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(b, err)
	s.mrB, err = pdB.RegMR(s.bufB, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(b, err)
	return s
}

// errStopped is pollOne's answer once stop is closed.
var errStopped = errors.New("stopped")

// pollOne busy-polls cq for one completion, as perftest's latency tests do, yielding the core
// to the devices' goroutines between polls, until stop (nil: never) is closed.
func pollOne(cq *engine.CQ, wc []engine.WC, stop <-chan struct{}) error {
	for deadline := time.Now().Add(10 * time.Second); cq.Poll(wc[:1]) == 0; runtime.Gosched() {
		select {
		case <-stop:
			return errStopped
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no completion in 10 s")
		}
	}
	if wc[0].Status != engine.WCSuccess {
		return fmt.Errorf("completion %s", fmtWC(wc[:1]))
	}
	return nil
}

// measureLatency times pingPong's round trips after a warm-up (neighbours resolved, buffers
// pooled), then stops the peer's goroutine (closing stop, waiting for its answer on done) and
// reports the latency.
func measureLatency(b *testing.B, pingPong func() time.Duration, stop chan struct{}, done chan error) {
	for range 100 {
		pingPong()
	}
	var rtts []time.Duration
	for b.Loop() {
		rtts = append(rtts, pingPong())
	}
	close(stop)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	reportLatency(b, rtts)
}

// reportLatency reports the median and the 99th percentile of one-way latencies, half of each
// round trip, as perftest's latency tests report them.
func reportLatency(b *testing.B, rtts []time.Duration) {
	slices.Sort(rtts)
	at := func(q float64) float64 { return rtts[min(len(rtts)-1, int(q*float64(len(rtts))))].Seconds() / 2 * 1e6 }
	b.ReportMetric(at(0.5), "median-us")
	b.ReportMetric(at(0.99), "p99-us")
	b.ReportMetric(0, "ns/op") // the latencies say it; ns/op would be the round trip
}

// BenchmarkSendLat is ib_send_lat between two devices of one process on serve's switch, each
// on a wall-clock host as serve's functions are: a SEND answered by a SEND, each side
// busy-polling its CQ for the receive. median-us and p99-us are one-way latency, half the round
// trip, as ib_send_lat reports it.
func BenchmarkSendLat(b *testing.B) {
	for _, n := range []int{8, 4096} {
		b.Run(sizeName(n), func(b *testing.B) {
			s := newSwitchedHosts(b, n)
			recvA := engine.RecvWR{ID: 1, SGL: sge(s.mrA, 0, uint32(n))}
			recvB := engine.RecvWR{ID: 2, SGL: sge(s.mrB, 0, uint32(n))}
			sendA := engine.SendWR{ID: 3, Opcode: engine.WRSend, SGL: sge(s.mrA, 0, uint32(n))}
			sendB := engine.SendWR{ID: 4, Opcode: engine.WRSend, SGL: sge(s.mrB, 0, uint32(n))}
			must(b, s.qa.PostRecv(recvA))
			must(b, s.qb.PostRecv(recvB))
			done, stop := make(chan error, 1), make(chan struct{})
			go func() {
				wc := make([]engine.WC, 1)
				for {
					if err := pollOne(s.cqB, wc, stop); err != nil {
						if err == errStopped {
							err = nil
						}
						done <- err
						return
					}
					if err := s.qb.PostRecv(recvB); err != nil {
						done <- err
						return
					}
					if err := s.qb.PostSend(sendB); err != nil {
						done <- err
						return
					}
				}
			}()
			wc := make([]engine.WC, 1)
			pingPong := func() time.Duration {
				start := time.Now()
				must(b, s.qa.PostSend(sendA))
				must(b, pollOne(s.cqA, wc, nil))
				rtt := time.Since(start)
				must(b, s.qa.PostRecv(recvA))
				return rtt
			}
			measureLatency(b, pingPong, stop, done)
		})
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}
