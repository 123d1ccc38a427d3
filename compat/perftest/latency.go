package perftest

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
)

// Latency is what a latency test measured, one way (half of each round trip), as perftest's
// print_report_lat reckons it: the round trips are the times between this side's consecutive
// posts, sorted, the two longest left out.
type Latency struct {
	Min, Max, Typical, Avg, Stdev, P99, P999 time.Duration
}

// latTail is how many of the longest round trips perftest leaves out (LAT_MEASURE_TAIL).
const latTail = 2

// latencyTest is ib_send_lat after H3: both sides post their receives, H4 says both are ready,
// the client sends first and each side answers each message it receives with its next, timing
// its own posts; each prints its own result, and H5 ends the test. Every SEND is signalled and
// waited for, one message in flight, as perftest's run_iter_lat_send.
func (r *runner) latencyTest(qpAttr engine.QPAttr) (Result, error) {
	o := r.o
	res := Result{QP: qpAttr}
	if err := r.postLatRecvs(o.RxDepth); err != nil {
		return res, err
	}
	if _, err := r.ch.record(r.local); err != nil { // H4: both sides' receives posted
		return res, err
	}
	posted := make([]time.Time, o.Iters)
	recvPosted := o.RxDepth
	sent, completed, received := 0, 0, 0
	r.peerMoved = r.watch()
	// await polls until cond holds, tallying what completes.
	await := func(cond func() bool, what string) error {
		for !cond() {
			wcs, err := r.poll(fmt.Sprintf("%s: %d of %d sent, %d received", what, sent, o.Iters, received))
			if moved := (errPeerMoved{}); errors.As(err, &moved) {
				if moved.err == nil && received >= o.Iters {
					// The peer is done and has sent its last handshake, which may overtake
					// the ACK of this side's last SEND: that completion is still to come.
					continue
				}
				return fmt.Errorf("perftest: the peer ended the test after %d of %d messages here (see its output; give both sides the same -n)", received, o.Iters)
			}
			if err != nil {
				return err
			}
			for _, wc := range wcs {
				if wc.Opcode != engine.WCRecv {
					completed++
					continue
				}
				if int(wc.ByteLen) != o.Size {
					return fmt.Errorf("perftest: the peer sends %d-byte messages, this side -s %d: give both sides the same -s", wc.ByteLen, o.Size)
				}
				received++
			}
		}
		return nil
	}
	answered := 0 // the peer's messages the loop has taken; a poll may have brought more
	for sent < o.Iters || completed < o.Iters || answered < o.Iters {
		if answered < o.Iters && (sent > 0 || o.Server) {
			answered++
			if err := await(func() bool { return received >= answered }, "waiting for the peer's message"); err != nil {
				return res, err
			}
			if recvPosted < o.Iters {
				if err := r.postLatRecvs(1); err != nil {
					return res, err
				}
				recvPosted++
			}
		}
		if sent < o.Iters {
			wr := r.request(sent, 0)
			wr.Flags = engine.SendSignaled
			posted[sent] = time.Now()
			if err := r.qp.PostSend(wr); err != nil {
				return res, err
			}
			sent++
		}
		if err := await(func() bool { return completed >= sent }, "waiting for this side's SEND"); err != nil {
			return res, err
		}
	}
	res.Report = Report{Size: uint64(o.Size), Iters: uint64(o.Iters)}
	res.Elapsed = posted[o.Iters-1].Sub(posted[0])
	res.Latency = latencyOf(posted)
	fmt.Fprintln(r.out, resultLine)
	fmt.Fprintln(r.out, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
	printLatency(r.out, res.Report, res.Latency)
	fmt.Fprintln(r.out, resultLine)
	return res, r.finish()
}

// postLatRecvs posts n receives of exactly the message size, all at the start of the buffer's
// second half, as perftest's latency tests do.
func (r *runner) postLatRecvs(n int) error {
	for range n {
		wr := engine.RecvWR{SGL: []engine.SGE{{Addr: r.mr.Addr() + uint64(r.half), Length: uint32(r.o.Size), LKey: r.mr.LKey()}}}
		if err := r.qp.PostRecv(wr); err != nil {
			return err
		}
	}
	return nil
}

// latencyOf is print_report_lat's figures from the post times: round trips between consecutive
// posts, sorted, the latTail longest left out, each halved. The median is get_median's (the
// mean of the middle two of an even count), the 99th and 99.9th percentiles the samples at
// ceil(n*p), t_max the first sample left out of the rest, and the standard deviation
// truncates each deviation to whole microseconds, as perftest's does.
func latencyOf(posted []time.Time) Latency {
	rtt := make([]time.Duration, len(posted)-1)
	for i := range rtt {
		rtt[i] = posted[i+1].Sub(posted[i])
	}
	slices.Sort(rtt)
	n := len(rtt) - latTail
	if n < 1 {
		return Latency{}
	}
	half := func(d time.Duration) time.Duration { return d / 2 }
	var l Latency
	l.Min, l.Max = half(rtt[0]), half(rtt[n])
	if (n-1)%2 != 0 {
		l.Typical = half((rtt[n/2] + rtt[n/2-1]) / 2)
	} else {
		l.Typical = half(rtt[n/2])
	}
	var sum time.Duration
	for _, d := range rtt[:n] {
		sum += d
	}
	l.Avg = half(sum / time.Duration(n))
	avgUS := l.Avg.Seconds() * 1e6
	var sq float64
	for _, d := range rtt[:n] {
		dev := math.Trunc(avgUS - half(d).Seconds()*1e6)
		sq += math.Trunc(dev * dev)
	}
	l.Stdev = time.Duration(math.Sqrt(sq/float64(n)) * float64(time.Microsecond))
	l.P99 = half(rtt[min(int(math.Ceil(float64(n)*0.99)), n)])
	l.P999 = half(rtt[min(int(math.Ceil(float64(n)*0.999)), n)])
	return l
}

// printLatency prints perftest's latency result line (REPORT_FMT_LAT), in microseconds.
func printLatency(out io.Writer, r Report, l Latency) {
	us := func(d time.Duration) float64 { return d.Seconds() * 1e6 }
	fmt.Fprintf(out, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		r.Size, r.Iters, us(l.Min), us(l.Max), us(l.Typical), us(l.Avg), us(l.Stdev), us(l.P99), us(l.P999))
}
