package perftest

import (
	"context"
	"fmt"
	"time"

	"github.com/softirdma/softirdma/emu"
)

type runner struct {
	o     Options
	qp    *emu.QP
	cq    *emu.CQ
	wake  chan struct{}
	mr    *emu.MR
	half  int
	inc   func(int) int
	peer  Record
	cycle int
	ctx   context.Context
	wcs   [64]emu.WC
}

// poll waits for completions and returns them; any error completion ends the test.
func (r *runner) poll() ([]emu.WC, error) {
	for {
		if n := r.cq.Poll(r.wcs[:]); n > 0 {
			for _, wc := range r.wcs[:n] {
				if wc.Status != emu.WCSuccess {
					side := "client"
					if r.o.Server {
						side = "server"
					}
					return nil, fmt.Errorf(" Completion with error at %s\n Failed status %d: wr_id %d (%s: %v)", side, wc.Status, wc.WRID, wc.Status, wc.Err)
				}
			}
			return r.wcs[:n], nil
		}
		select {
		case <-r.wake:
		case <-r.ctx.Done():
			return nil, r.ctx.Err()
		case <-time.After(r.o.Timeout):
			return nil, fmt.Errorf("perftest: no completion for %v", r.o.Timeout)
		}
	}
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
	step, wrap := 0, 1
	if o.Size <= r.cycle/2 {
		step = r.inc(o.Size)
		wrap = max(1, r.cycle/step)
	}
	var res Result
	posted, completed, outstanding := 0, 0, 0
	start := time.Now()
	// The peak is the best rate over windows of tx_depth completed WRs (a single completion's
	// interval says nothing about bandwidth).
	peak := 0.0
	winStart, winDone := start, 0
	for completed < o.Iters {
		for outstanding < o.TxDepth && posted < o.Iters {
			k := posted % wrap
			wr := emu.SendWR{ID: uint64(posted), SGL: []emu.SGE{{Addr: r.mr.Addr() + uint64(k*step), Length: uint32(o.Size), LKey: r.mr.LKey()}}}
			if posted%cqMod == cqMod-1 || posted == o.Iters-1 {
				wr.Flags = emu.SendSignaled
			}
			switch o.Test {
			case Write:
				wr.Opcode, wr.RemoteAddr, wr.RKey = emu.WRRDMAWrite, r.peer.VAddr+uint64(k*step), r.peer.RKey
			case Read:
				wr.Opcode, wr.RemoteAddr, wr.RKey = emu.WRRDMARead, r.peer.VAddr+uint64(k*step), r.peer.RKey
			case Atomic:
				wr.Opcode, wr.RemoteAddr, wr.RKey, wr.CompareAdd = emu.WRAtomicFetchAndAdd, r.peer.VAddr+uint64(k*step), r.peer.RKey, 1
			case Send:
				wr.Opcode = emu.WRSend
			}
			if err := r.qp.PostSend(wr); err != nil {
				return res, err
			}
			posted++
			outstanding++
		}
		wcs, err := r.poll()
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

func report(size, iters int, el time.Duration, peak float64) Report {
	s := max(el.Seconds(), 1e-9)
	avg := float64(size) * float64(iters) / s / (1 << 20)
	return Report{Size: uint64(size), Iters: uint64(iters), PeakMBs: max(peak, avg), AvgMBs: avg, MsgRateMpps: float64(iters) / s / 1e6}
}

func (r *runner) postRecvs(n int) error {
	step, wrap := 0, 1
	if r.o.Size <= r.cycle/2 {
		step = r.inc(r.o.Size)
		wrap = max(1, r.cycle/step)
	}
	for i := 0; i < n; i++ {
		k := i % wrap
		wr := emu.RecvWR{ID: uint64(i), SGL: []emu.SGE{{Addr: r.mr.Addr() + uint64(r.half+k*step), Length: uint32(r.o.Size), LKey: r.mr.LKey()}}}
		if err := r.qp.PostRecv(wr); err != nil {
			return err
		}
	}
	return nil
}

// sendServer is the send_bw server: count receives, repost while fewer than iters are posted.
func (r *runner) sendServer() (Result, error) {
	o := r.o
	var res Result
	posted := o.RxDepth
	received := 0
	var start time.Time
	for received < o.Iters {
		wcs, err := r.poll()
		if err != nil {
			return res, err
		}
		if start.IsZero() {
			start = time.Now()
		}
		for range wcs {
			received++
			if posted < o.Iters {
				if err := r.postRecvs(1); err != nil {
					return res, err
				}
				posted++
			}
		}
	}
	res.Elapsed = time.Since(start)
	res.Report = report(o.Size, o.Iters, res.Elapsed, 0)
	res.PeakMBs = 0 // the server does not measure a peak
	return res, nil
}
