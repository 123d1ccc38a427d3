package main

import (
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/softirdma/softirdma/keys"
)

func init() {
	register("demo", "a guided, seeded tour of the card (runs on the embedded default: no QEMU, no adapter, no root)", runDemo)
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", stderr)
	seed := fs.Uint64("seed", 1, "seed for every random choice (key8 values); the same seed gives the same run")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma demo [-seed N]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Walks through the key space of one softirdma device: memory regions, memory windows")
		fmt.Fprintln(stderr, "of type 1 and 2 bound with rkey rotation, remote accesses through them, invalidation")
		fmt.Fprintln(stderr, "by LOCAL_INV and SEND_WITH_INV, and stale keys refused. Exits 0 only when every step")
		fmt.Fprintln(stderr, "got the expected result.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softirdma demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	d := &demo{out: stdout, s: keys.New(keys.Config{Rand: keys.Seeded(*seed)})}
	fmt.Fprintf(stdout, "softirdma demo, seed %d: the key space of one device\n\n", *seed)
	d.run()
	fmt.Fprintln(stdout)
	if d.failed > 0 {
		fmt.Fprintf(stdout, "FAILED: %d of %d steps did not get the expected result\n", d.failed, d.steps)
		return 1
	}
	fmt.Fprintf(stdout, "all %d steps got the expected result\n", d.steps)
	return 0
}

// demo is the tour's state: one device's key space, the host and peer protection domains and
// QPs, and a tally of steps.
type demo struct {
	out           io.Writer
	s             *keys.Space
	steps, failed int
}

const (
	demoPD  keys.PD  = 1
	demoQP  keys.QPN = 0x11 // the local QP that binds windows and receives SEND_WITH_INV
	otherQP keys.QPN = 0x12
)

// step prints one numbered line; ok says whether the step got what it expected.
func (d *demo) step(ok bool, format string, args ...any) {
	d.steps++
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		d.failed++
	}
	fmt.Fprintf(d.out, "%s %2d  %s\n", mark, d.steps, fmt.Sprintf(format, args...))
}

// explain prints an indented reason under the last step.
func (d *demo) explain(format string, args ...any) {
	fmt.Fprintf(d.out, "          %s\n", fmt.Sprintf(format, args...))
}

// refused runs a remote access that must fail with REM_ACCESS_ERR and NAK 0x62.
func (d *demo) refused(what string, a keys.RemoteAccess) {
	_, err := d.s.Remote(a)
	var ae *keys.AccessError
	ok := errors.As(err, &ae) && ae.Status == keys.StatusRemAccessErr && ae.Syndrome == keys.SyndromeRemoteAccess
	d.step(ok, "%s: remote %s of %d B at 0x%x with rkey %s is refused", what, rightName(a.Rights), a.Len, a.VA, a.Key)
	if err != nil {
		d.explain("%v", err)
	}
}

// write lands data through an rkey as an arriving RDMA WRITE would.
func (d *demo) write(a keys.RemoteAccess, data string) bool {
	a.Len, a.Rights = uint64(len(data)), keys.RemoteWrite
	sp, err := d.s.Remote(a)
	ok := err == nil && sp.CopyFrom([]byte(data)) == len(data)
	d.step(ok, "remote WRITE of %q at 0x%x with rkey %s lands", data, a.VA, a.Key)
	if err != nil {
		d.explain("%v", err)
	}
	return ok
}

func rightName(r keys.Access) string {
	switch r {
	case keys.RemoteRead:
		return "READ"
	case keys.RemoteWrite:
		return "WRITE"
	case keys.RemoteAtomic:
		return "atomic"
	}
	return r.String()
}

func (d *demo) run() {
	s := d.s
	buf := make([]byte, 64<<10)
	const iova = 0x7f00_0000_0000
	mr, err := s.RegMR(keys.MRSpec{PD: demoPD, Mem: keys.Contiguous(buf), IOVA: iova, Access: keys.LocalWrite | keys.MWBind | keys.RemoteRead})
	d.step(err == nil, "reg_mr 64 KiB at iova 0x%x, LOCAL_WRITE|MW_BIND|REMOTE_READ: lkey = rkey = %s (index 0x%06x, key8 0x%02x)",
		uint64(iova), mr, mr.Index(), mr.Key8())
	if err != nil {
		d.explain("%v", err)
		return
	}
	_, err = s.RegMR(keys.MRSpec{PD: demoPD, Mem: keys.Contiguous(make([]byte, 64)), Access: keys.RemoteWrite})
	d.step(errors.Is(err, syscall.EINVAL), "reg_mr with REMOTE_WRITE but no LOCAL_WRITE is refused")
	d.explain("%v", err)
	d.refused("the MR grants no remote write", keys.RemoteAccess{Key: mr, PD: demoPD, QP: demoQP, VA: iova, Len: 8, Rights: keys.RemoteWrite})

	// Type 1: bound by the bind verb, key8 + 1 on every bind.
	w1, err := s.AllocMW(demoPD, keys.MWType1)
	d.step(err == nil, "alloc_mw type 1: rkey %s (VALID, length 0: grants nothing yet)", w1)
	b1, err := s.BindMW(keys.Bind{MW: w1, QP: demoQP, PD: demoPD, MR: mr, Addr: iova + 0x1000, Len: 0x1000, Access: keys.RemoteWrite | keys.RemoteRead})
	d.step(err == nil && b1.Key == w1.Inc(), "bind type 1 to [0x%x, +4 KiB) REMOTE_WRITE|REMOTE_READ: rkey %s -> %s (key8 0x%02x -> 0x%02x, same index)",
		uint64(iova+0x1000), w1, b1.Key, w1.Key8(), b1.Key.Key8())
	d.write(keys.RemoteAccess{Key: b1.Key, PD: demoPD, QP: otherQP, VA: iova + 0x1000}, "through a window")
	d.step(string(buf[0x1000:0x1010]) == "through a window", "the bytes are in the MR at offset 0x1000")
	d.refused("window bounds hold (rxe checks only the MR's)", keys.RemoteAccess{Key: b1.Key, PD: demoPD, QP: demoQP, VA: iova, Len: 8, Rights: keys.RemoteWrite})
	err = s.DeregMR(mr)
	d.step(errors.Is(err, syscall.EBUSY), "dereg_mr while a window is bound fails")
	d.explain("%v", err)
	b1z, err := s.BindMW(keys.Bind{MW: b1.Key, QP: demoQP, PD: demoPD})
	d.step(err == nil && b1z.Key == b1.Key.Inc(), "zero-length bind invalidates the type 1 window: rkey %s -> %s", b1.Key, b1z.Key)
	d.refused("the rkey from before the zero-length bind", keys.RemoteAccess{Key: b1.Key, PD: demoPD, QP: demoQP, VA: iova + 0x1000, Len: 8, Rights: keys.RemoteWrite})
	err = s.Invalidate(keys.Invalidate{Key: b1z.Key, QP: demoQP})
	var ae *keys.AccessError
	d.step(errors.As(err, &ae) && ae.Status == keys.StatusLocQPOpErr, "LOCAL_INV on a type 1 window completes with LOC_QP_OP_ERR")
	d.explain("%v", err)

	// Type 2: bound by a BIND_MW work request carrying the consumer's key8; tied to PD and QP.
	w2, err := s.AllocMW(demoPD, keys.MWType2)
	d.step(err == nil, "alloc_mw type 2: rkey %s (FREE)", w2)
	b2, err := s.BindMW(keys.Bind{MW: w2, Key8: w2.Inc().Key8(), QP: demoQP, PD: demoPD, MR: mr, Addr: iova + 0x2000, Len: 0x2000, Access: keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic})
	d.step(err == nil && b2.Key == w2.Inc(), "BIND_MW on QP 0x%06x with key8 0x%02x: rkey %s -> %s", demoQP, w2.Inc().Key8(), w2, b2.Key)
	d.write(keys.RemoteAccess{Key: b2.Key, PD: demoPD, QP: demoQP, VA: iova + 0x2000}, "type 2 window")
	d.refused("a type 2B window answers only on the QP that bound it", keys.RemoteAccess{Key: b2.Key, PD: demoPD, QP: otherQP, VA: iova + 0x2000, Len: 8, Rights: keys.RemoteWrite})
	_, err = s.BindMW(keys.Bind{MW: b2.Key, Key8: b2.Key.Inc().Key8(), QP: demoQP, PD: demoPD, MR: mr, Addr: iova, Len: 64, Access: keys.RemoteRead})
	d.step(errors.As(err, &ae) && ae.Status == keys.StatusMWBindErr, "binding a bound type 2 window again completes with MW_BIND_ERR")
	d.explain("%v", err)
	err = s.Invalidate(keys.Invalidate{Key: b2.Key, QP: demoQP, Remote: true})
	d.step(err == nil, "an arriving SEND_WITH_INV on QP 0x%06x invalidates rkey %s", demoQP, b2.Key)
	d.refused("after SEND_WITH_INV", keys.RemoteAccess{Key: b2.Key, PD: demoPD, QP: demoQP, VA: iova + 0x2000, Len: 8, Rights: keys.RemoteRead})
	b3, err := s.BindMW(keys.Bind{MW: b2.Key, Key8: b2.Key.Inc().Key8(), QP: demoQP, PD: demoPD, MR: mr, Addr: iova + 0x2000, Len: 0x100, Access: keys.RemoteRead})
	d.step(err == nil && b3.Key == b2.Key.Inc(), "rebind with a new key8: rkey %s", b3.Key)
	err = s.Invalidate(keys.Invalidate{Key: b3.Key, QP: demoQP})
	d.step(err == nil, "LOCAL_INV invalidates rkey %s", b3.Key)
	d.refused("after LOCAL_INV", keys.RemoteAccess{Key: b3.Key, PD: demoPD, QP: demoQP, VA: iova + 0x2000, Len: 8, Rights: keys.RemoteRead})
	err = s.Invalidate(keys.Invalidate{Key: 0x00c0ffee, QP: demoQP, Remote: true})
	d.step(errors.As(err, &ae) && ae.Status == keys.StatusRemInvReqErr && ae.Syndrome == keys.SyndromeInvalidReq,
		"SEND_WITH_INV naming an unknown rkey: REM_INV_REQ_ERR and NAK 0x61 (rxe sends an ACK)")
	d.explain("%v", err)

	// Teardown.
	d.step(s.DeallocMW(b1z.Key) == nil && s.DeallocMW(b3.Key) == nil, "dealloc_mw both windows")
	d.step(s.DeregMR(mr) == nil, "dereg_mr succeeds once no window is bound")
	d.refused("after dereg_mr", keys.RemoteAccess{Key: mr, PD: demoPD, QP: demoQP, VA: iova, Len: 8, Rights: keys.RemoteRead})
	mrs, mws := s.Counts()
	d.step(mrs == 0 && mws == 0, "nothing is left: %d MRs, %d MWs", mrs, mws)
}
