package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softirdma/softirdma/emu"
)

// Test is which bandwidth test runs.
type Test uint8

const (
	Write Test = iota + 1
	Read
	Atomic
	Send
)

// ParseTest reads "write", "read", "atomic" or "send".
func ParseTest(s string) (Test, error) {
	switch s {
	case "write":
		return Write, nil
	case "read":
		return Read, nil
	case "atomic":
		return Atomic, nil
	case "send":
		return Send, nil
	}
	return 0, fmt.Errorf("perftest: no test %q (write, read, atomic, send)", s)
}

func (t Test) title() string {
	return [...]string{"", "RDMA_Write BW Test", "RDMA_Read BW Test", "Atomic FETCH_AND_ADD BW Test", "Send BW Test"}[t]
}

// Options are perftest's, with its defaults in brackets.
type Options struct {
	Test    Test
	Server  bool
	Host    string
	Port    int // [18515]
	Size    int // [65536; 8 for atomic]
	Iters   int // [5000 for write, 1000 otherwise]
	TxDepth int // [128]
	RxDepth int // send server [512]
	// MTU in bytes; 0 uses 1024 (what rxe reports on a 1500-byte link) and the peer's if lower.
	MTU int
	// OutReads is the READ/atomic depth this side offers as a target [16].
	OutReads int
	// GID is this side's GID: an IPv4 address is sent IPv4-mapped.
	GID     netip.Addr
	Timeout time.Duration // the control exchange and each wait [60s]
	Rand    mrand.Source
}

func (o *Options) defaults() {
	if o.Port == 0 {
		o.Port = 18515
	}
	if o.Test == Atomic {
		o.Size = 8
	} else if o.Size == 0 {
		o.Size = 65536
	}
	if o.Iters == 0 {
		o.Iters = 1000
		if o.Test == Write {
			o.Iters = 5000
		}
	}
	if o.TxDepth == 0 {
		o.TxDepth = 128
	}
	o.TxDepth = min(o.TxDepth, o.Iters)
	if o.RxDepth == 0 {
		o.RxDepth = 512
	}
	o.RxDepth = min(o.RxDepth, o.Iters)
	o.RxDepth += o.RxDepth % 2
	if o.OutReads == 0 {
		o.OutReads = 16
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
}

// Result is what the run measured, or for a write/read/atomic server what the client reported.
type Result struct {
	Report
	Elapsed time.Duration
}

// Run runs one side of the test on dev and prints perftest's lines to out.
func Run(ctx context.Context, dev *emu.Device, o Options, out io.Writer) (Result, error) {
	o.defaults()
	var res Result
	if o.Test < Write || o.Test > Send {
		return res, errors.New("perftest: no test chosen")
	}
	if !o.Server && o.Host == "" {
		return res, errors.New("perftest: a client needs a server to connect to")
	}
	localMTU := 3
	if o.MTU != 0 {
		m, ok := emu.MTUOf(o.MTU)
		if !ok {
			return res, fmt.Errorf("perftest: MTU %d is not one of 256..4096", o.MTU)
		}
		localMTU = int(m)
	}

	// The control connection first: the server waits for its client before it sets up.
	c, err := dial(ctx, o, out)
	if err != nil {
		return res, err
	}
	defer c.close()

	const cacheLine = 64
	inc := func(n int) int { return max(cacheLine, (n+cacheLine-1)/cacheLine*cacheLine) }
	buffSize := max(o.Size, 4096)
	half := inc(buffSize)
	buf := make([]byte, 2*half)
	rnd := mrand.New(seed(o.Rand))
	for i := range buf {
		buf[i] = byte(rnd.Uint32())
	}
	access := emu.AccessLocalWrite
	qpAccess := emu.Access(0)
	outReads := 1
	switch o.Test {
	case Write:
		access |= emu.AccessRemoteWrite
		qpAccess = emu.AccessRemoteWrite
	case Read:
		access |= emu.AccessRemoteRead
		qpAccess = emu.AccessRemoteRead
		outReads = o.OutReads
	case Atomic:
		access |= emu.AccessRemoteAtomic
		qpAccess = emu.AccessRemoteAtomic
		outReads = o.OutReads
	case Send:
		qpAccess = emu.AccessRemoteWrite | emu.AccessLocalWrite
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return res, err
	}
	mr, err := pd.RegMR(buf, access)
	if err != nil {
		return res, err
	}
	defer mr.Dereg()
	cqSize := o.TxDepth + o.RxDepth + 1
	cq, err := dev.CreateCQ(cqSize)
	if err != nil {
		return res, err
	}
	wake := make(chan struct{}, 1)
	cq.OnCompletion(func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	qp, err := pd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: emu.QPCap{MaxSendWR: o.TxDepth, MaxRecvWR: o.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return res, err
	}
	defer qp.Destroy()
	if err := qp.Modify(emu.QPAttr{State: emu.QPSInit, Port: 1, AccessFlags: qpAccess}, emu.AttrState|emu.AttrPKeyIndex|emu.AttrPort|emu.AttrAccessFlags); err != nil {
		return res, err
	}
	local := Record{OutReads: uint16(outReads), QPN: qp.Num(), PSN: uint32(rnd.Uint64() & 0xffffff), RKey: mr.RKey(), VAddr: mr.Addr() + uint64(half)}
	if o.GID.IsValid() {
		local.GID = o.GID.As16()
	}
	h, err := c.begin(local, localMTU)
	if err != nil {
		return res, err
	}
	mtu := emu.MTU(h.mtu)
	printHeader(out, o, mtu, outReads)
	printRecord(out, "local", local, o.Test)
	printRecord(out, "remote", h.peer, o.Test)

	// Connect: the server to RTR only, the client to RTS.
	dgid := netip.AddrFrom16(h.peer.GID).Unmap()
	attr := emu.QPAttr{State: emu.QPSRTR, AH: emu.AHAttr{DGID: dgid, HopLimit: 0xff}, PathMTU: mtu, DestQPN: h.peer.QPN,
		RQPSN: h.peer.PSN, MaxDestRdAtomic: uint8(min(outReads, 128)), MinRNRTimer: 12}
	if err := qp.Modify(attr, emu.AttrState|emu.AttrAV|emu.AttrPathMTU|emu.AttrDestQPN|emu.AttrRQPSN|emu.AttrMaxDestRdAtomic|emu.AttrMinRNRTimer); err != nil {
		return res, fmt.Errorf("perftest: failed to modify QP to RTR: %w", err)
	}
	if !o.Server {
		attr = emu.QPAttr{State: emu.QPSRTS, SQPSN: local.PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
			MaxRdAtomic: uint8(min(max(int(h.peer.OutReads), 1), dev.Limits().MaxQPInitRdAtom))}
		if err := qp.Modify(attr, emu.AttrState|emu.AttrSQPSN|emu.AttrTimeout|emu.AttrRetryCnt|emu.AttrRNRRetry|emu.AttrMaxQPRdAtomic); err != nil {
			return res, fmt.Errorf("perftest: failed to modify QP to RTS: %w", err)
		}
	}
	for range 2 { // H2, H3
		if _, err := c.record(local); err != nil {
			return res, err
		}
	}
	run := runner{o: o, qp: qp, cq: cq, wake: wake, mr: mr, half: half, inc: inc, peer: h.peer, cycle: h.cycleBuffer, ctx: ctx}
	fmt.Fprintln(out, resultLine)
	fmt.Fprintln(out, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	if o.Test == Send {
		if o.Server {
			if err := run.postRecvs(o.RxDepth); err != nil {
				return res, err
			}
		}
		if _, err := c.record(local); err != nil { // H4: both ready
			return res, err
		}
		if o.Server {
			res, err = run.sendServer()
		} else {
			res, err = run.initiate()
		}
		if err != nil {
			return res, err
		}
		printResult(out, res.Report)
	} else {
		// The client runs, then H4; the server waits at H4 for the whole test, then prints
		// the client's report.
		if !o.Server {
			if res, err = run.initiate(); err != nil {
				return res, err
			}
		}
		if _, err := c.record(local); err != nil {
			return res, err
		}
		peerReport, err := c.exchangeReport(res.Report, h.peerVersion)
		if err != nil {
			return res, err
		}
		if o.Server {
			res.Report = peerReport
		}
		printResult(out, res.Report)
	}
	fmt.Fprintln(out, resultLine)
	if _, err := c.record(local); err != nil { // H5
		return res, err
	}
	return res, nil
}

const resultLine = "---------------------------------------------------------------------------------------"

func seed(src mrand.Source) mrand.Source {
	if src != nil {
		return src
	}
	return mrand.NewPCG(uint64(time.Now().UnixNano()), 0x9e3779b9)
}

func dial(ctx context.Context, o Options, out io.Writer) (*conn, error) {
	addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	if o.Server {
		fmt.Fprintln(out, "\n************************************\n* Waiting for client to connect... *\n************************************")
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp4", addr)
		if err != nil {
			return nil, fmt.Errorf("perftest: couldn't listen on %s: %w", addr, err)
		}
		defer l.Close()
		stop := context.AfterFunc(ctx, func() { l.Close() })
		defer stop()
		c, err := l.Accept()
		if err != nil {
			return nil, fmt.Errorf("perftest: accept: %w", err)
		}
		_ = c.SetDeadline(time.Now().Add(o.Timeout + 10*time.Minute))
		return &conn{c: c}, nil
	}
	deadline := time.Now().Add(o.Timeout)
	for {
		d := net.Dialer{Timeout: o.Timeout}
		c, err := d.DialContext(ctx, "tcp4", addr)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(o.Timeout + 10*time.Minute))
			return &conn{c: c, client: true}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("perftest: couldn't connect to %s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func printHeader(out io.Writer, o Options, mtu emu.MTU, outReads int) {
	fmt.Fprintln(out, resultLine)
	fmt.Fprintf(out, "                    %s\n", o.Test.title())
	fmt.Fprintf(out, " Number of qps   : 1\t\tTransport type : IB\n")
	fmt.Fprintf(out, " Connection type : RC\t\tUsing SRQ      : OFF\n")
	if !o.Server {
		fmt.Fprintf(out, " TX depth        : %d\n", o.TxDepth)
	} else if o.Test == Send {
		fmt.Fprintf(out, " RX depth        : %d\n", o.RxDepth)
	}
	fmt.Fprintf(out, " Mtu             : %d[B]\n", mtu.Bytes())
	fmt.Fprintf(out, " Link type       : Ethernet\n")
	if o.Test == Read || o.Test == Atomic {
		fmt.Fprintf(out, " Outstand reads  : %d\n", outReads)
	} else {
		fmt.Fprintf(out, " Max inline data : 0[B]\n")
	}
	fmt.Fprintf(out, " Data ex. method : Ethernet\n")
	fmt.Fprintln(out, resultLine)
}

// cHex formats v as C's "%#0<width>x" does: "0x" counted in the width, and no "0x" for zero.
func cHex(width int, v uint64) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

func printRecord(out io.Writer, which string, r Record, t Test) {
	s := fmt.Sprintf(" %s address: LID %s QPN %s PSN %s", which, cHex(4, uint64(r.LID)), cHex(6, uint64(r.QPN)), cHex(6, uint64(r.PSN)))
	if t == Read {
		s += " OUT " + cHex(4, uint64(r.OutReads))
	}
	if t == Write || t == Read {
		s += fmt.Sprintf(" RKey %s VAddr %s", cHex(8, uint64(r.RKey)), cHex(16, r.VAddr))
	}
	fmt.Fprintln(out, s)
	var g []string
	for _, b := range r.GID {
		g = append(g, fmt.Sprintf("%02d", b)) // decimal, as perftest prints it
	}
	fmt.Fprintf(out, " GID: %s\n", strings.Join(g, ":"))
}

func printResult(out io.Writer, r Report) {
	fmt.Fprintf(out, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.PeakMBs, r.AvgMBs, r.MsgRateMpps)
}
