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

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/internal/ctrl"
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

// Options are perftest's, with its defaults in brackets; a zero field takes its default.
type Options struct {
	Test Test
	// Conn is the connection type (-c): engine.QPTypeRC, or QPTypeUD for the send test [RC].
	Conn    engine.QPType
	Server  bool
	Host    string
	Port    int // [18515]
	Size    int // 1..MaxSize [65536; 8 for atomic; UD: the MTU, and at most that]
	Iters   int // MinIters..MaxIters [5000 for write, 1000 otherwise]
	TxDepth int // 1..MaxTxDepth [128]
	RxDepth int // send server, 1..MaxRxDepth [512; UD: the iterations, at most 16000]
	// MTU in bytes; 0 uses 1024 (what rxe reports on a 1500-byte link) and the peer's if lower.
	MTU int
	// OutReads is the READ/atomic depth this side offers as a target, 1..128 [16].
	OutReads int
	// RateLimit caps the client's messages per second, 0..MaxRateLimit, 0 for no cap
	// (perftest's --rate_limit N --rate_units p --rate_limit_type SW): a UD client faster
	// than its server loses what the server's link cannot take in.
	RateLimit int
	// GID is this side's GID: an IPv4 address is sent IPv4-mapped.
	GID netip.Addr
	// Timeout bounds one connection attempt, and how long a run waits for a completion [60s].
	Timeout time.Duration
	// Wait keeps a client trying for this long while its server is not up yet: the connection
	// is refused, or closed or reset before the server sent its version. 0 tries once, as
	// perftest does.
	Wait time.Duration
	// Idle is how long a server waits for a connection's first messages before it drops the
	// connection and waits for another [10s].
	Idle time.Duration
	// Log gets one line for each connection a server drops and when a client starts waiting;
	// nil discards them.
	Log io.Writer
	// RDMACM (-R) connects the QPs through rdma_cm (emu/rdmacm) at Host and Port, and runs the
	// exchange over a QP of its own connected the same way, as perftest's -R: no TCP at all.
	RDMACM bool
	// Listening, if set, is called once a server listens (with -R: its rdma_cm listener).
	Listening func()
	// QPTimeout is the local ACK timeout exponent (-u: 4.096 us x 2^n; 0 waits forever), 0..31,
	// and RetryCount the retries after a timeout, 0..7; nil is perftest's 14 and 7. Only the
	// client's QP goes to RTS and uses them.
	QPTimeout, RetryCount *int
	Rand                  mrand.Source
}

// Limits of the options. perftest takes messages up to 2 GiB; softirdma stops at MaxSize, the
// largest size perftest's -a runs (its buffer is twice the message size).
const (
	MaxSize     = 8 << 20
	MinIters    = 5 // perftest's MIN_ITER
	MaxIters    = 100_000_000
	MaxTxDepth  = 15000 // perftest's MAX_TX
	MaxRxDepth  = 16384 // perftest's MAX_RX
	MaxOutReads = 128
	// MaxRateLimit is the most messages per second a rate limit may name.
	MaxRateLimit = 100_000_000
)

// QKey is the Q_Key perftest gives its UD QPs and every datagram (DEF_QKEY).
const QKey = 0x11111111

// udAddition is what a UD receive holds beyond the message: the GRH area.
const udAddition = engine.GRHLen

func (o *Options) defaults() {
	if o.Conn == 0 {
		o.Conn = engine.QPTypeRC
	}
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
	if o.RxDepth == 0 {
		o.RxDepth = 512
		if o.Conn == engine.QPTypeUD { // perftest's force_dependecies: a datagram lost is not sent again
			o.RxDepth = min(o.Iters, 16000)
		}
	}
	if o.OutReads == 0 {
		o.OutReads = 16
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
}

// check refuses what the run cannot do, before it allocates anything.
func (o *Options) check() error {
	bad := func(what string, v any, want string) error {
		return fmt.Errorf("perftest: %s %v is out of range (%s)", what, v, want)
	}
	switch {
	case o.Test < Write || o.Test > Send:
		return errors.New("perftest: no test chosen")
	case o.Conn != engine.QPTypeRC && o.Conn != engine.QPTypeUD:
		return fmt.Errorf("perftest: connection type %s: RC or UD", o.Conn)
	case o.Conn == engine.QPTypeUD && o.Test != Send:
		return errors.New("perftest: UD connection only possible in SEND verb")
	case o.RDMACM && o.Conn == engine.QPTypeUD:
		return errors.New("perftest: -R connects RC QPs here (UD through rdma_cm is not supported)")
	case !o.Server && o.Host == "":
		return errors.New("perftest: a client needs a server to connect to")
	case o.Port < 1 || o.Port > 65535:
		return bad("port", o.Port, "1..65535")
	case o.Size < 1 || o.Size > MaxSize:
		return bad("size", o.Size, fmt.Sprintf("1..%d", MaxSize))
	case o.Iters < MinIters || o.Iters > MaxIters:
		return bad("iterations", o.Iters, fmt.Sprintf("%d..%d", MinIters, MaxIters))
	case o.TxDepth < 1 || o.TxDepth > MaxTxDepth:
		return bad("TX depth", o.TxDepth, fmt.Sprintf("1..%d", MaxTxDepth))
	case o.RxDepth < 1 || o.RxDepth > MaxRxDepth:
		return bad("RX depth", o.RxDepth, fmt.Sprintf("1..%d", MaxRxDepth))
	case o.OutReads < 1 || o.OutReads > MaxOutReads:
		return bad("outstanding reads", o.OutReads, fmt.Sprintf("1..%d", MaxOutReads))
	case o.RateLimit < 0 || o.RateLimit > MaxRateLimit:
		return bad("rate limit", o.RateLimit, fmt.Sprintf("0..%d", MaxRateLimit))
	case o.QPTimeout != nil && (*o.QPTimeout < 0 || *o.QPTimeout > 31):
		return bad("QP timeout", *o.QPTimeout, "0..31")
	case o.RetryCount != nil && (*o.RetryCount < 0 || *o.RetryCount > 7):
		return bad("retry count", *o.RetryCount, "0..7")
	case o.Timeout < 0 || o.Wait < 0 || o.Idle < 0:
		return errors.New("perftest: negative timeout")
	}
	if _, ok := engine.MTUOf(o.MTU); o.MTU != 0 && !ok {
		return fmt.Errorf("perftest: MTU %d is not one of 256, 512, 1024, 2048, 4096", o.MTU)
	}
	return nil
}

// ErrFlushed is in the error of a run whose QP went to the error state with nothing but
// flushed completions to say so.
var ErrFlushed = ctrl.ErrFlushed

// Result is what the run measured, or for a write/read/atomic server what the client reported.
type Result struct {
	Report
	Elapsed time.Duration
	// QP is the queue pair's attributes once it was connected (ibv_query_qp).
	QP engine.QPAttr
}

// Run runs one side of the test on dev and prints perftest's lines to out.
func Run(ctx context.Context, dev *engine.Device, o Options, out io.Writer) (Result, error) {
	sizeGiven := o.Size != 0
	o.defaults()
	ud := o.Conn == engine.QPTypeUD
	var res Result
	if err := o.check(); err != nil {
		return res, err
	}
	o.TxDepth = min(o.TxDepth, o.Iters)
	o.RxDepth = min(o.RxDepth, o.Iters)
	o.RxDepth += o.RxDepth % 2
	localMTU := 3
	if o.MTU != 0 {
		m, _ := engine.MTUOf(o.MTU)
		localMTU = int(m)
	}
	if ud {
		// A datagram is one packet of at most the port's MTU, whatever -m says.
		localMTU = min(localMTU, int(dev.ActiveMTU()))
	}
	start := time.Now()

	// The QP first: it depends on nothing the peer says. The buffer follows the peer's page size,
	// so it is registered once the preamble has given it.
	access := engine.AccessLocalWrite
	qpAccess := engine.Access(0)
	outReads := 1
	switch o.Test {
	case Write:
		access |= engine.AccessRemoteWrite
		qpAccess = engine.AccessRemoteWrite
	case Read:
		access |= engine.AccessRemoteRead
		qpAccess = engine.AccessRemoteRead
		outReads = o.OutReads
	case Atomic:
		access |= engine.AccessRemoteAtomic
		qpAccess = engine.AccessRemoteAtomic
		outReads = o.OutReads
	case Send:
		qpAccess = engine.AccessRemoteWrite | engine.AccessLocalWrite
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return res, err
	}
	cq, err := dev.CreateCQ(o.TxDepth + o.RxDepth + 2)
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
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: o.Conn, SendCQ: cq, RecvCQ: cq,
		Cap: engine.QPCap{MaxSendWR: o.TxDepth, MaxRecvWR: o.RxDepth + 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return res, err
	}
	defer qp.Destroy()
	initMask := engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrAccessFlags
	if ud {
		initMask = engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrQKey
	}
	if err := qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, AccessFlags: qpAccess, QKey: QKey}, initMask); err != nil {
		return res, err
	}
	rnd := mrand.New(seed(o.Rand))
	local := Record{OutReads: uint16(outReads), QPN: qp.Num(), PSN: uint32(rnd.Uint64() & 0xffffff)}
	if o.GID.IsValid() {
		local.GID = o.GID.As16()
	}

	const cacheLine = 64
	inc := func(n int) int { return max(cacheLine, (n+cacheLine-1)/cacheLine*cacheLine) }
	var mr *engine.MR
	half := 0
	defer func() {
		if mr != nil {
			mr.Dereg()
		}
	}()
	// register gives the buffer the size the peer's page size asks for: two halves of
	// max(size, page size), the second the remote target, filled with random bytes.
	register := func(cycleBuffer int) error {
		h := inc(max(o.Size, cycleBuffer))
		if mr != nil && h == half {
			return nil
		}
		if mr != nil {
			if err := mr.Dereg(); err != nil {
				return err
			}
			mr = nil
		}
		extra := 0
		if ud {
			extra = cacheLine // room for the GRH area before the last receive's message
		}
		buf := make([]byte, 2*h+extra)
		for i := range buf {
			buf[i] = byte(rnd.Uint32())
		}
		m, err := pd.RegMR(buf, access)
		if err != nil {
			return err
		}
		mr, half = m, h
		local.RKey, local.VAddr = mr.RKey(), mr.Addr()+uint64(half)
		return nil
	}

	// The control connection up to H1: a server drops a client that fails it and waits for
	// another. With -R it is a QP of its own, and the test's QP is connected through rdma_cm
	// on the way.
	var ch channel
	var c *conn
	var cmc *cmConn
	var h handshake
	if o.RDMACM {
		cmc, h, err = connectCM(ctx, dev, o, qp, outReads, localMTU, out, register, &local)
		if cmc != nil {
			defer cmc.close()
		}
		ch = cmc
	} else {
		c, h, err = connect(ctx, o, localMTU, out, func(c *conn, h *handshake) error {
			if err := register(h.cycleBuffer); err != nil {
				return ctrl.Fatal(err)
			}
			var err error
			h.peer, err = hello(c, local)
			return err
		})
		if c != nil {
			defer c.close()
		}
		ch = c
	}
	if err != nil {
		return res, err
	}
	ch.setTimeout(o.Timeout)
	mtu := engine.MTU(h.mtu)
	if ud && o.Size > mtu.Bytes() {
		if sizeGiven {
			return res, fmt.Errorf("perftest: max message size in UD cannot be greater than MTU (%d)", mtu.Bytes())
		}
		// perftest's check_mtu: the default size becomes the MTU.
		if o.Log != nil {
			fmt.Fprintf(o.Log, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu.Bytes())
		}
		o.Size = mtu.Bytes()
	}
	printHeader(out, o, mtu, outReads)
	printRecord(out, "local", local, o.Test)
	printRecord(out, "remote", h.peer, o.Test)

	// Connect: the server to RTR only, the client to RTS. A UD QP takes only its state (and
	// PSN): its peer is in each SEND, through the address handle the client makes. rdma_cm
	// connected it already.
	dgid := netip.AddrFrom16(h.peer.GID).Unmap()
	// perftest's AV says hop limit 0xFF, but the kernel resolves a RoCE unicast path's hop limit
	// from its route (ib_resolve_eth_dmac): rxe's frames carry TTL 64, and so do these.
	av := engine.AHAttr{DGID: dgid, HopLimit: 64}
	attr := engine.QPAttr{State: engine.QPSRTR, AH: av, PathMTU: mtu, DestQPN: h.peer.QPN,
		RQPSN: h.peer.PSN, MaxDestRdAtomic: uint8(min(outReads, 128)), MinRNRTimer: engine.DefaultMinRNRTimer}
	rtrMask := engine.AttrState | engine.AttrAV | engine.AttrPathMTU | engine.AttrDestQPN | engine.AttrRQPSN | engine.AttrMaxDestRdAtomic | engine.AttrMinRNRTimer
	if ud {
		rtrMask = engine.AttrState
	}
	if !o.RDMACM {
		if err := qp.Modify(attr, rtrMask); err != nil {
			return res, fmt.Errorf("perftest: %w", ctrl.RTRFailed(err, dgid))
		}
	}
	var ah *engine.AH
	if !o.Server && !o.RDMACM {
		attr = engine.QPAttr{State: engine.QPSRTS, SQPSN: local.PSN, Timeout: uint8(ctrl.OrDefault(o.QPTimeout, engine.DefaultTimeout)), RetryCnt: uint8(ctrl.OrDefault(o.RetryCount, engine.DefaultRetryCnt)), RNRRetry: engine.DefaultRNRRetry,
			MaxRdAtomic: uint8(min(max(int(h.peer.OutReads), 1), dev.Limits().MaxQPInitRdAtom))}
		rtsMask := engine.AttrState | engine.AttrSQPSN | engine.AttrTimeout | engine.AttrRetryCnt | engine.AttrRNRRetry | engine.AttrMaxQPRdAtomic
		if ud {
			rtsMask = engine.AttrState | engine.AttrSQPSN
		}
		if err := qp.Modify(attr, rtsMask); err != nil {
			return res, fmt.Errorf("perftest: failed to modify QP to RTS: %w", err)
		}
		if ud {
			if ah, err = pd.CreateAH(av); err != nil {
				return res, fmt.Errorf("perftest: failed to create AH: %w", ctrl.RTRFailed(err, dgid))
			}
		}
	}
	qpAttr := qp.Query()
	for range 2 { // H2, H3
		if _, err := ch.record(local); err != nil {
			return res, err
		}
	}
	run := runner{o: o, qp: qp, cq: cq, wake: wake, mr: mr, half: half, inc: inc, peer: h.peer, cycle: h.cycleBuffer, ctx: ctx, start: start, c: c, ah: ah}
	fmt.Fprintln(out, resultLine)
	fmt.Fprintln(out, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	if o.Test == Send {
		if o.Server {
			if err := run.postRecvs(o.RxDepth); err != nil {
				return res, err
			}
		}
		if _, err := ch.record(local); err != nil { // H4: both ready
			return res, err
		}
		if o.Server {
			res, err = run.sendServer()
		} else {
			res, err = run.initiate()
		}
		res.QP = qpAttr
		if err != nil {
			return res, err
		}
		printResult(out, res.Report)
	} else {
		// The client runs, then H4; the server waits at H4 for the whole test, then prints
		// the client's report.
		if !o.Server {
			res, err = run.initiate()
			res.QP = qpAttr
			if err != nil {
				return res, err
			}
		}
		if o.Server { // the server waits here for the whole test
			ch.setTimeout(0)
		}
		if _, err := ch.record(local); err != nil {
			return res, err
		}
		ch.setTimeout(o.Timeout)
		peerReport, err := exchangeReport(ch, res.Report, h.peerVersion)
		if err != nil {
			return res, err
		}
		if o.Server {
			res.Report = peerReport
			res.QP = qpAttr
		}
		printResult(out, res.Report)
	}
	fmt.Fprintln(out, resultLine)
	if _, err := ch.record(local); err != nil { // H5
		if o.Test == Send && !o.Server && errors.Is(err, errPeerClosed) { // ib_send_bw's sides do not exchange -n
			err = fmt.Errorf("perftest: the server closed the connection after this side sent its %d messages: it ended with an error (see its output; ib_send_bw's sides exchange neither -n nor -s)", o.Iters)
		}
		return res, err
	}
	if cmc != nil {
		return res, cmc.disconnect()
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

// connect opens the control connection and runs the preamble and then hello on it: a server
// drops any connection that fails them and waits for another; a client with Wait tries again
// while its server is not up.
func connect(ctx context.Context, o Options, localMTU int, out io.Writer, hello func(*conn, *handshake) error) (*conn, handshake, error) {
	addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	var c *conn
	var h handshake
	first := func(client bool) func(*ctrl.Conn) error {
		return func(cc *ctrl.Conn) error {
			c = newConn(cc, client)
			if client { // a server's Accept bounds the start of a connection with Idle
				c.timeout = o.Timeout
			}
			var err error
			if h, err = preamble(c, client, localMTU); err != nil {
				return err
			}
			return hello(c, &h)
		}
	}
	var err error
	if o.Server {
		fmt.Fprintln(out, "\n************************************\n* Waiting for client to connect... *\n************************************")
		var lc net.ListenConfig
		l, lerr := lc.Listen(ctx, "tcp4", addr)
		if lerr != nil {
			return nil, h, fmt.Errorf("perftest: couldn't listen on %s: %w", addr, lerr)
		}
		defer l.Close()
		if o.Listening != nil {
			o.Listening()
		}
		_, err = ctrl.Server{Idle: o.Idle, Log: o.Log}.Accept(ctx, l, first(false))
	} else {
		_, err = ctrl.Client{Network: "tcp4", Addr: addr, Timeout: o.Timeout, Wait: o.Wait, Log: o.Log}.Connect(ctx, first(true))
	}
	if err != nil {
		if !strings.HasPrefix(err.Error(), "perftest: ") {
			err = fmt.Errorf("perftest: %w", err)
		}
		return nil, h, err
	}
	return c, h, nil
}

func printHeader(out io.Writer, o Options, mtu engine.MTU, outReads int) {
	fmt.Fprintln(out, resultLine)
	fmt.Fprintf(out, "                    %s\n", o.Test.title())
	fmt.Fprintf(out, " Number of qps   : 1\t\tTransport type : IB\n")
	fmt.Fprintf(out, " Connection type : %s\t\tUsing SRQ      : OFF\n", o.Conn)
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
