package perftest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/internal/ctrl"
)

// runner is one side's run of the test, from its QP to the last handshake.
type runner struct {
	o     Options
	ctx   context.Context
	dev   *engine.Device
	out   io.Writer
	start time.Time // of the run, for timeout messages
	// localMTU is the MTU this side offers (an ibv_mtu).
	localMTU int
	pd       *engine.PD
	qp       *engine.QP
	cq       *engine.CQ
	wake     chan struct{}
	rnd      *mrand.Rand
	// access is what the buffer grants the peer; outReads the READ/atomic depth offered.
	access   engine.Access
	outReads int
	// local is this side's record, filled in as the QP and the buffer are made.
	local Record
	mr    *engine.MR
	half  int // the size of the buffer's two halves; the second is the peer's target
	// ch is the exchange: c (TCP), or with -R cmc (a QP of its own); h what its start agreed.
	ch    channel
	c     *conn
	cmc   *cmConn
	h     handshake
	peer  Record
	cycle int
	ah    *engine.AH // UD: the server's address
	// late, once set, replaces the timeout of a poll: a UD server whose client has finished
	// waits this long for datagrams still on their way, then calls the rest lost.
	late time.Duration
	wcs  [64]engine.WC
	// peerMoved is the watch on the control connection while the traffic runs (conn.watch).
	peerMoved <-chan error
	// moved holds the peer's move until the CQ has been looked at once more.
	moved *errPeerMoved
}

// errPeerMoved is poll's answer when the peer sent something on the control connection, or
// closed it, while this side waited for completions.
type errPeerMoved struct{ err error }

func (e errPeerMoved) Error() string { return "the peer moved on the control connection" }

// watch watches the TCP exchange while the test runs (conn.watch); with -R there is none.
func (r *runner) watch() <-chan error {
	if r.c == nil {
		return nil
	}
	return r.c.watch()
}

// poll waits for completions and returns them; any error completion ends the test. done is
// how far the test got, for the messages.
func (r *runner) poll(done string) ([]engine.WC, error) {
	for {
		if n := r.cq.Poll(r.wcs[:]); n > 0 {
			if wc, failed := ctrl.FirstFailure(r.wcs[:n]); failed {
				if wc.Status == engine.WCWRFlushErr { // look for the completion that says why
					n += r.cq.Poll(r.wcs[n:])
					wc, _ = ctrl.FirstFailure(r.wcs[:n])
				}
				side := "client"
				if r.o.Server {
					side = "server"
				}
				return nil, fmt.Errorf(" Completion with error at %s\n Failed status %d: wr_id %d (%s: %w)", side, wc.Status, wc.WRID, wc.Status, r.why(wc))
			}
			return r.wcs[:n], nil
		}
		if m := r.moved; m != nil {
			r.moved = nil
			return nil, *m
		}
		select {
		case <-r.wake:
		case err := <-r.peerMoved:
			// The peer moves on only after its last WR completed, so every completion that
			// move implies is in the CQ already, but its wake-up may be ready in the same
			// select and lose the draw: poll once more before saying the peer moved.
			r.peerMoved = nil
			r.moved = &errPeerMoved{err}
		case <-r.ctx.Done():
			return nil, fmt.Errorf("perftest: %w with %s", ctrl.Stopped(r.ctx, time.Since(r.start)), done)
		case <-time.After(cmp.Or(r.late, r.o.Timeout)):
			if r.late > 0 {
				return nil, fmt.Errorf("perftest: the client finished, and no datagram came for %v since, with %s: UD sends nothing again, so they were lost (or the client's -n is smaller)", r.late, done)
			}
			return nil, fmt.Errorf("perftest: no completion for %v with %s: has the peer stopped, or does it expect a different -n?", r.o.Timeout, done)
		}
	}
}

// why is ctrl.Why with what perftest's exchange tells about a request the peer refused. The
// path MTU is negotiated in the exchange, so it is not a difference of -m. A server's QP and
// buffer grant remote access for its own test only, so a refused WRITE, READ or atomic means the
// peer runs another test; a SEND is refused when it is longer than the receive the server posted.
func (r *runner) why(wc engine.WC) error {
	if r.o.Server || wc.Err == nil || (wc.Status != engine.WCRemInvReqErr && wc.Status != engine.WCRemAccessErr) {
		return ctrl.Why(wc)
	}
	if r.o.Test.sends() {
		return fmt.Errorf("%w (the peer refused the SEND: its receives are shorter than this side's %d-byte messages; give both sides the same -s)", wc.Err, r.o.Size)
	}
	op := [...]string{Write: "RDMA WRITE", Read: "RDMA READ", Atomic: "atomic"}[r.o.Test]
	return fmt.Errorf("%w (the peer refused the %s: its QP or buffer does not grant it, so it runs another test; run the same test on both sides)", wc.Err, op)
}

// initiate is the client's loop (run_iter_bw): up to tx_depth WRs outstanding, every cq_mod-th
// and the last signalled, addresses stepping through the cycle buffer for small messages.
func (r *runner) initiate() (Result, error) {
	o := r.o
	cqMod := 100
	if o.Size > 8192 {
		cqMod = 1
	}
	cqMod = min(cqMod, o.TxDepth)
	step, wrap := r.layout()
	var res Result
	posted, completed, outstanding := 0, 0, 0
	start := time.Now()
	// The peak is the best rate over windows of tx_depth completed WRs (a single completion's
	// interval says nothing about bandwidth).
	peak := 0.0
	winStart, winDone := start, 0
	r.peerMoved = r.watch()
	for completed < o.Iters {
		for outstanding < o.TxDepth && posted < o.Iters {
			if o.RateLimit > 0 {
				// Software rate limiting: message n leaves no earlier than n/rate seconds in.
				time.Sleep(time.Until(start.Add(time.Duration(int64(posted) * int64(time.Second) / int64(o.RateLimit)))))
			}
			wr := r.request(posted, uint64(posted%wrap*step))
			if posted%cqMod == cqMod-1 || posted == o.Iters-1 {
				wr.Flags = engine.SendSignaled
			}
			if err := r.qp.PostSend(wr); err != nil {
				return res, err
			}
			posted++
			outstanding++
		}
		wcs, err := r.poll(fmt.Sprintf("%d of %d completed", completed, o.Iters))
		var moved errPeerMoved
		if errors.As(err, &moved) {
			if moved.err != nil {
				return res, fmt.Errorf("perftest: the server went away after %d of %d completed here: its control connection closed (%v)", completed, o.Iters, moved.err)
			}
			if o.Test == Send { // the one test whose sides do not exchange -n and -s
				return res, fmt.Errorf("perftest: the server ended the test after %d of %d completed here (see its output; ib_send_bw's sides exchange neither -n nor -s)", completed, o.Iters)
			}
			return res, fmt.Errorf("perftest: the server ended the test after %d of %d completed here (see its output)", completed, o.Iters)
		}
		if err != nil {
			return res, err
		}
		for _, wc := range wcs {
			n := cqMod
			if int(wc.WRID) == o.Iters-1 {
				n = o.Iters - completed
			}
			completed += n
			outstanding -= n
			if winDone += n; winDone >= o.TxDepth {
				now := time.Now()
				if d := now.Sub(winStart).Seconds(); d > 0 {
					peak = max(peak, float64(winDone*o.Size)/d/(1<<20))
				}
				winStart, winDone = now, 0
			}
		}
	}
	res.Elapsed = time.Since(start)
	res.Report = report(o.Size, o.Iters, res.Elapsed, peak)
	return res, nil
}

// request is the test's work request n, for the message at off in both sides' buffers.
func (r *runner) request(n int, off uint64) engine.SendWR {
	wr := engine.SendWR{ID: uint64(n), SGL: []engine.SGE{{Addr: r.mr.Addr() + off, Length: uint32(r.o.Size), LKey: r.mr.LKey()}}}
	switch r.o.Test {
	case Write:
		wr.Opcode, wr.RemoteAddr, wr.RKey = engine.WRRDMAWrite, r.peer.VAddr+off, r.peer.RKey
	case Read:
		wr.Opcode, wr.RemoteAddr, wr.RKey = engine.WRRDMARead, r.peer.VAddr+off, r.peer.RKey
	case Atomic:
		wr.Opcode, wr.RemoteAddr, wr.RKey, wr.CompareAdd = engine.WRAtomicFetchAndAdd, r.peer.VAddr+off, r.peer.RKey, 1
	case Send, SendLat:
		wr.Opcode = engine.WRSend
		if r.ah != nil {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ah, r.peer.QPN, QKey
		}
	}
	return wr
}

func report(size, iters int, el time.Duration, peak float64) Report {
	s := max(el.Seconds(), 1e-9)
	avg := float64(size) * float64(iters) / s / (1 << 20)
	return Report{Size: uint64(size), Iters: uint64(iters), PeakMBs: max(peak, avg), AvgMBs: avg, MsgRateMpps: float64(iters) / s / 1e6}
}

// layout is where the messages go in the buffer: a small message (up to half the peer's page) each
// at the next cache line, wrapping after a page; a larger one all at the start.
func (r *runner) layout() (step, wrap int) {
	if r.o.Size > r.cycle/2 {
		return 0, 1
	}
	step = cacheLines(r.o.Size)
	return step, max(1, r.cycle/step)
}

func (r *runner) postRecvs(n int) error {
	step, wrap := r.layout()
	// A UD receive starts 40 bytes before a cache line, so the message lands on it (perftest's
	// cache_line_size - UD_ADDITION), and holds the GRH area too.
	at, n0 := 0, r.o.Size
	if r.o.Conn == engine.QPTypeUD {
		at, n0 = 64-udAddition, r.o.Size+udAddition
	}
	for i := 0; i < n; i++ {
		k := i % wrap
		wr := engine.RecvWR{ID: uint64(i), SGL: []engine.SGE{{Addr: r.mr.Addr() + uint64(r.half+k*step+at), Length: uint32(n0), LKey: r.mr.LKey()}}}
		if err := r.qp.PostRecv(wr); err != nil {
			return err
		}
	}
	return nil
}

// sendServer is the send_bw server: count receives, repost while fewer than iters are posted.
// One receive more than iters is posted, and the control connection watched, so that a client
// that sends more messages, or fewer, than this side expects is told apart from one that is slow.
// udLate is how long a UD send server waits for datagrams after its client has finished.
const udLate = 2 * time.Second

func (r *runner) sendServer() (Result, error) {
	o := r.o
	var res Result
	posted := o.RxDepth
	received := 0
	var start time.Time
	r.peerMoved = r.watch()
	mismatch := func(what string) error {
		return fmt.Errorf("perftest: the client %s the %d messages this side expects: give both sides the same -n", what, o.Iters)
	}
	for received < o.Iters {
		wcs, err := r.poll(fmt.Sprintf("%d of %d messages received", received, o.Iters))
		var moved errPeerMoved
		if errors.As(err, &moved) {
			if moved.err != nil {
				return res, fmt.Errorf("perftest: the client closed the control connection after %d of the %d messages this side expects (see its output)", received, o.Iters)
			}
			if o.Conn == engine.QPTypeUD && r.late == 0 {
				// A UD client is done when its datagrams have left, not when they arrived:
				// the rest may still be on the link.
				r.late = udLate
				continue
			}
			return res, mismatch(fmt.Sprintf("finished after sending %d of", received))
		}
		if err != nil {
			return res, err
		}
		if start.IsZero() {
			start = time.Now()
		}
		for _, wc := range wcs {
			// A shorter SEND fits the receive and completes; counted, it would make a result
			// line of this side's -s that measures nothing. (A longer one fails as LOC_LEN_ERR.)
			n := int(wc.ByteLen)
			if o.Conn == engine.QPTypeUD {
				n -= udAddition
			}
			if n != o.Size {
				return res, fmt.Errorf("perftest: the client sends %d-byte messages, this side expects -s %d: give both sides the same -s", n, o.Size)
			}
			received++
			if posted <= o.Iters {
				if err := r.postRecvs(1); err != nil {
					return res, err
				}
				posted++
			}
		}
	}
	res.Elapsed = time.Since(start)
	// The client goes on to the next handshake when it is done; a message in the spare
	// receive first means it had more to send. (With -R that handshake comes on the exchange's
	// own QP, which this side does not watch meanwhile.)
	if received > o.Iters {
		return res, mismatch("sent more than")
	}
	if r.late == 0 && r.c != nil {
		if _, err := r.poll("all messages received"); err == nil {
			return res, mismatch("sent more than")
		} else if moved := (errPeerMoved{}); !errors.As(err, &moved) || moved.err != nil {
			return res, err
		}
	}
	res.Report = report(o.Size, o.Iters, res.Elapsed, 0)
	res.PeakMBs = 0 // the server does not measure a peak
	return res, nil
}
