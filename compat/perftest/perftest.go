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

	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/compat/internal/ctrl"
)

// Test is which test runs: a bandwidth test (ib_write_bw, ib_read_bw, ib_atomic_bw,
// ib_send_bw) or a latency test (ib_send_lat).
type Test uint8

const (
	Write Test = iota + 1
	Read
	Atomic
	Send
	SendLat // ib_send_lat: a ping-pong of SENDs, each side timing its own round trips
)

// ParseTest reads "write", "read", "atomic", "send" or "send_lat".
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
	case "send_lat":
		return SendLat, nil
	}
	return 0, fmt.Errorf("perftest: no test %q (write, read, atomic, send, send_lat)", s)
}

func (t Test) title() string {
	return [...]string{"", "RDMA_Write BW Test", "RDMA_Read BW Test", "Atomic FETCH_AND_ADD BW Test", "Send BW Test", "Send Latency Test"}[t]
}

// latency says the test is a latency test.
func (t Test) latency() bool { return t == SendLat }

// sends says the test's messages are SENDs, which the peer receives into posted receives.
func (t Test) sends() bool { return t == Send || t == SendLat }

// Options are perftest's, with its defaults in brackets; a zero field takes its default.
type Options struct {
	Test Test
	// Conn is the connection type (-c): engine.QPTypeRC, or QPTypeUD for the send test [RC].
	Conn    engine.QPType
	Server  bool
	Host    string
	Port    int // [18515]
	Size    int // 1..MaxSize [65536; 8 for atomic; 2 for a latency test; UD: the MTU, and at most that]
	Iters   int // MinIters..MaxIters [5000 for write, 1000 otherwise]
	TxDepth int // 1..MaxTxDepth [128; a latency test has one message in flight]
	RxDepth int // send server (both sides of send_lat), 1..MaxRxDepth [512; UD: the iterations, at most 16000]
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
	ctrl.Default(&o.Conn, engine.QPTypeRC)
	ctrl.Default(&o.Port, 18515)
	if o.Test == Atomic {
		o.Size = 8
	}
	if o.Test.latency() {
		ctrl.Default(&o.Size, 2) // perftest's DEF_SIZE_LAT
		o.TxDepth = 1            // DEF_TX_LAT: one message in flight, whatever -t says
	}
	ctrl.Default(&o.Size, 65536)
	if o.Test == Write {
		ctrl.Default(&o.Iters, 5000)
	}
	ctrl.Default(&o.Iters, 1000)
	ctrl.Default(&o.TxDepth, 128)
	if o.Conn == engine.QPTypeUD { // perftest's force_dependecies: a datagram lost is not sent again
		ctrl.Default(&o.RxDepth, min(o.Iters, 16000))
	}
	ctrl.Default(&o.RxDepth, 512)
	ctrl.Default(&o.OutReads, 16)
	ctrl.Default(&o.Timeout, 60*time.Second)
}

// check refuses what the run cannot do, before it allocates anything.
func (o *Options) check() error {
	switch {
	case o.Test < Write || o.Test > SendLat:
		return errors.New("perftest: no test chosen")
	case o.Conn != engine.QPTypeRC && o.Conn != engine.QPTypeUD:
		return fmt.Errorf("perftest: connection type %s: RC or UD", o.Conn)
	case o.Conn == engine.QPTypeUD && o.Test == SendLat:
		return errors.New("perftest: send_lat runs on RC here (UD latency is not supported)")
	case o.Conn == engine.QPTypeUD && o.Test != Send:
		return errors.New("perftest: UD connection only possible in SEND verb")
	case o.RDMACM && o.Conn == engine.QPTypeUD:
		return errors.New("perftest: -R connects RC QPs here (UD through rdma_cm is not supported)")
	case o.RDMACM && o.Test.latency():
		return errors.New("perftest: -R runs the bandwidth tests here (a latency test exchanges over TCP)")
	case !o.Server && o.Host == "":
		return errors.New("perftest: a client needs a server to connect to")
	}
	if err := ctrl.OutOfRange("perftest", append([]ctrl.Range{
		{What: "port", V: o.Port, Lo: 1, Hi: 65535},
		{What: "size", V: o.Size, Lo: 1, Hi: MaxSize},
		{What: "iterations", V: o.Iters, Lo: MinIters, Hi: MaxIters},
		{What: "TX depth", V: o.TxDepth, Lo: 1, Hi: MaxTxDepth},
		{What: "RX depth", V: o.RxDepth, Lo: 1, Hi: MaxRxDepth},
		{What: "outstanding reads", V: o.OutReads, Lo: 1, Hi: MaxOutReads},
		{What: "rate limit", V: o.RateLimit, Lo: 0, Hi: MaxRateLimit},
	}, ctrl.QPRanges(o.QPTimeout, o.RetryCount)...)...); err != nil {
		return err
	}
	if o.Timeout < 0 || o.Wait < 0 || o.Idle < 0 {
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
	// Latency is a latency test's figures (Report then has the size and iterations only).
	Latency Latency
}

// Run runs one side of the test on dev and prints perftest's lines to out.
func Run(ctx context.Context, dev *engine.Device, o Options, out io.Writer) (Result, error) {
	sizeGiven := o.Size != 0
	o.defaults()
	if err := o.check(); err != nil {
		return Result{}, err
	}
	o.TxDepth = min(o.TxDepth, o.Iters)
	o.RxDepth = min(o.RxDepth, o.Iters)
	o.RxDepth += o.RxDepth % 2
	r := &runner{o: o, ctx: ctx, dev: dev, out: out, localMTU: localMTU(o, dev), start: time.Now()}
	// The QP first: it depends on nothing the peer says. The buffer follows the peer's page size,
	// so it is registered once the preamble has given it.
	if err := r.createQP(); err != nil {
		return Result{}, err
	}
	defer r.qp.Destroy()
	defer r.dereg()
	err := r.connect()
	defer r.hangUp()
	if err != nil {
		return Result{}, err
	}
	if err := r.agree(sizeGiven); err != nil {
		return Result{}, err
	}
	qpAttr, err := r.ready()
	if err != nil {
		return Result{}, err
	}
	if o.Test.latency() {
		return r.latencyTest(qpAttr)
	}
	fmt.Fprintln(out, resultLine)
	fmt.Fprintln(out, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	var res Result
	if o.Test == Send {
		res, err = r.sendTest(qpAttr)
	} else {
		res, err = r.remoteTest(qpAttr)
	}
	if err != nil {
		return res, err
	}
	fmt.Fprintln(out, resultLine)
	return res, r.finish()
}

// localMTU is the MTU this side offers (an ibv_mtu): -m, or 1024; for UD at most the port's.
func localMTU(o Options, dev *engine.Device) int {
	mtu := 3
	if o.MTU != 0 {
		m, _ := engine.MTUOf(o.MTU)
		mtu = int(m)
	}
	if o.Conn == engine.QPTypeUD {
		// A datagram is one packet of at most the port's MTU, whatever -m says.
		mtu = min(mtu, int(dev.ActiveMTU()))
	}
	return mtu
}

// accessFor is what the test's buffer and QP grant the peer, and the READ/atomic depth this side
// offers as a target.
func accessFor(o Options) (buf, qp engine.Access, outReads int) {
	buf, outReads = engine.AccessLocalWrite, 1
	switch o.Test {
	case Write:
		buf |= engine.AccessRemoteWrite
		qp = engine.AccessRemoteWrite
	case Read:
		buf |= engine.AccessRemoteRead
		qp = engine.AccessRemoteRead
		outReads = o.OutReads
	case Atomic:
		buf |= engine.AccessRemoteAtomic
		qp = engine.AccessRemoteAtomic
		outReads = o.OutReads
	case Send, SendLat:
		qp = engine.AccessRemoteWrite | engine.AccessLocalWrite
	}
	return buf, qp, outReads
}

// createQP makes the test's PD, CQ and QP, takes the QP to INIT, and fills in this side's record
// but for the buffer.
func (r *runner) createQP() error {
	o := r.o
	var qpAccess engine.Access
	r.access, qpAccess, r.outReads = accessFor(o)
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return err
	}
	if r.cq, err = r.dev.CreateCQ(o.TxDepth + o.RxDepth + 2); err != nil {
		return err
	}
	r.wake = make(chan struct{}, 1)
	cmpeer.Signal(r.cq, r.wake)
	if r.qp, err = r.pd.CreateQP(engine.QPInitAttr{Type: o.Conn, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: engine.QPCap{MaxSendWR: o.TxDepth, MaxRecvWR: o.RxDepth + 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	initMask := engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrAccessFlags
	if r.ud() {
		initMask = engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrQKey
	}
	if err := r.qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, AccessFlags: qpAccess, QKey: QKey}, initMask); err != nil {
		r.qp.Destroy()
		return err
	}
	r.rnd = mrand.New(seed(o.Rand))
	r.local = Record{OutReads: uint16(r.outReads), QPN: r.qp.Num(), PSN: uint32(r.rnd.Uint64() & 0xffffff)}
	if o.GID.IsValid() {
		r.local.GID = o.GID.As16()
	}
	return nil
}

func (r *runner) ud() bool { return r.o.Conn == engine.QPTypeUD }

// cacheLine is the cache line perftest assumes for the buffer's layout.
const cacheLine = 64

// cacheLines is n rounded up to whole cache lines, at least one.
func cacheLines(n int) int { return max(cacheLine, (n+cacheLine-1)/cacheLine*cacheLine) }

// register gives the buffer the size the peer's page size asks for: two halves of max(size, page
// size), the second the remote target, filled with random bytes.
func (r *runner) register(cycleBuffer int) error {
	h := cacheLines(max(r.o.Size, cycleBuffer))
	if r.mr != nil && h == r.half {
		return nil
	}
	if r.mr != nil {
		if err := r.mr.Dereg(); err != nil {
			return err
		}
		r.mr = nil
	}
	extra := 0
	if r.ud() {
		extra = cacheLine // room for the GRH area before the last receive's message
	}
	buf := make([]byte, 2*h+extra)
	for i := range buf {
		buf[i] = byte(r.rnd.Uint32())
	}
	m, err := r.pd.RegMR(buf, r.access)
	if err != nil {
		return err
	}
	r.mr, r.half = m, h
	r.local.RKey, r.local.VAddr = r.mr.RKey(), r.mr.Addr()+uint64(r.half)
	return nil
}

func (r *runner) dereg() {
	if r.mr != nil {
		r.mr.Dereg()
	}
}

// connect runs the control connection up to H1: a server drops a client that fails it and waits
// for another. With -R it is a QP of its own, and the test's QP is connected through rdma_cm on
// the way.
func (r *runner) connect() error {
	var err error
	if r.o.RDMACM {
		r.cmc, r.h, err = connectCM(r.ctx, r.dev, r.o, r.qp, r.outReads, r.localMTU, r.out, r.register, &r.local)
		r.ch = r.cmc
	} else {
		r.c, r.h, err = connect(r.ctx, r.o, r.localMTU, r.out, func(c *conn, h *handshake) error {
			if err := r.register(h.cycleBuffer); err != nil {
				return ctrl.Fatal(err)
			}
			var err error
			h.peer, err = hello(c, r.local)
			return err
		})
		r.ch = r.c
	}
	r.peer, r.cycle = r.h.peer, r.h.cycleBuffer
	return err
}

// hangUp closes the control connection, or with -R the exchange's QP, once the run is over.
func (r *runner) hangUp() {
	if r.cmc != nil {
		r.cmc.close()
	}
	if r.c != nil {
		r.c.close()
	}
}

// agree settles what the handshake leaves open (a UD message is at most the MTU agreed) and
// prints the header and both records.
func (r *runner) agree(sizeGiven bool) error {
	r.ch.setTimeout(r.o.Timeout)
	mtu := engine.MTU(r.h.mtu)
	if r.ud() && r.o.Size > mtu.Bytes() {
		if sizeGiven {
			return fmt.Errorf("perftest: max message size in UD cannot be greater than MTU (%d)", mtu.Bytes())
		}
		// perftest's check_mtu: the default size becomes the MTU.
		if r.o.Log != nil {
			fmt.Fprintf(r.o.Log, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu.Bytes())
		}
		r.o.Size = mtu.Bytes()
	}
	printHeader(r.out, r.o, mtu, r.outReads)
	printRecord(r.out, "local", r.local, r.o.Test)
	printRecord(r.out, "remote", r.h.peer, r.o.Test)
	return nil
}

// ready connects the QP, the server's to RTR only, the client's to RTS, and runs H2 and H3. A UD
// QP takes only its state (and PSN): its peer is in each SEND, through the address handle the
// client makes. rdma_cm connected it already.
func (r *runner) ready() (engine.QPAttr, error) {
	dgid := netip.AddrFrom16(r.h.peer.GID).Unmap()
	// perftest's AV says hop limit 0xFF, but the kernel resolves a RoCE unicast path's hop limit
	// from its route (ib_resolve_eth_dmac): rxe's frames carry TTL 64, and so do these.
	av := engine.AHAttr{DGID: dgid, HopLimit: 64}
	if !r.o.RDMACM {
		if err := r.qp.Modify(r.rtr(av), r.rtrMask()); err != nil {
			return engine.QPAttr{}, fmt.Errorf("perftest: %w", ctrl.RTRFailed(err, dgid))
		}
	}
	// A latency test's server sends too: its QP goes to RTS as well.
	if (!r.o.Server || r.o.Test.latency()) && !r.o.RDMACM {
		if err := r.toRTS(av); err != nil {
			return engine.QPAttr{}, err
		}
	}
	qpAttr := r.qp.Query()
	for range 2 { // H2, H3
		if _, err := r.ch.record(r.local); err != nil {
			return qpAttr, err
		}
	}
	return qpAttr, nil
}

// rtr is the QP's move to RTR toward av.
func (r *runner) rtr(av engine.AHAttr) engine.QPAttr {
	return engine.QPAttr{State: engine.QPSRTR, AH: av, PathMTU: engine.MTU(r.h.mtu), DestQPN: r.h.peer.QPN,
		RQPSN: r.h.peer.PSN, MaxDestRdAtomic: uint8(min(r.outReads, 128)), MinRNRTimer: engine.DefaultMinRNRTimer}
}

func (r *runner) rtrMask() engine.AttrMask {
	if r.ud() {
		return engine.AttrState
	}
	return engine.AttrState | engine.AttrAV | engine.AttrPathMTU | engine.AttrDestQPN | engine.AttrRQPSN | engine.AttrMaxDestRdAtomic | engine.AttrMinRNRTimer
}

// toRTS takes a client's QP to RTS, and for UD makes the address handle of the server.
func (r *runner) toRTS(av engine.AHAttr) error {
	attr := engine.QPAttr{State: engine.QPSRTS, SQPSN: r.local.PSN, Timeout: uint8(ctrl.OrDefault(r.o.QPTimeout, engine.DefaultTimeout)), RetryCnt: uint8(ctrl.OrDefault(r.o.RetryCount, engine.DefaultRetryCnt)), RNRRetry: engine.DefaultRNRRetry,
		MaxRdAtomic: uint8(min(max(int(r.h.peer.OutReads), 1), r.dev.Limits().MaxQPInitRdAtom))}
	rtsMask := engine.AttrState | engine.AttrSQPSN | engine.AttrTimeout | engine.AttrRetryCnt | engine.AttrRNRRetry | engine.AttrMaxQPRdAtomic
	if r.ud() {
		rtsMask = engine.AttrState | engine.AttrSQPSN
	}
	if err := r.qp.Modify(attr, rtsMask); err != nil {
		return fmt.Errorf("perftest: failed to modify QP to RTS: %w", err)
	}
	if r.ud() {
		var err error
		if r.ah, err = r.pd.CreateAH(av); err != nil {
			return fmt.Errorf("perftest: failed to create AH: %w", ctrl.RTRFailed(err, av.DGID))
		}
	}
	return nil
}

// sendTest is the send test after H3: the server posts its receives, H4 says both are ready, and
// each side counts its own messages and prints its own result.
func (r *runner) sendTest(qpAttr engine.QPAttr) (Result, error) {
	if r.o.Server {
		if err := r.postRecvs(r.o.RxDepth); err != nil {
			return Result{}, err
		}
	}
	if _, err := r.ch.record(r.local); err != nil { // H4: both ready
		return Result{}, err
	}
	var res Result
	var err error
	if r.o.Server {
		res, err = r.sendServer()
	} else {
		res, err = r.initiate()
	}
	res.QP = qpAttr
	if err != nil {
		return res, err
	}
	printResult(r.out, res.Report)
	return res, nil
}

// remoteTest is a WRITE, READ or atomic test after H3: the client runs, then H4; the server
// waits at H4 for the whole test, then prints the client's report.
func (r *runner) remoteTest(qpAttr engine.QPAttr) (Result, error) {
	var res Result
	if !r.o.Server {
		var err error
		res, err = r.initiate()
		res.QP = qpAttr
		if err != nil {
			return res, err
		}
	}
	if r.o.Server { // the server waits here for the whole test
		r.ch.setTimeout(0)
	}
	if _, err := r.ch.record(r.local); err != nil {
		return res, err
	}
	r.ch.setTimeout(r.o.Timeout)
	peerReport, err := exchangeReport(r.ch, res.Report, r.h.peerVersion)
	if err != nil {
		return res, err
	}
	if r.o.Server {
		res.Report = peerReport
		res.QP = qpAttr
	}
	printResult(r.out, res.Report)
	return res, nil
}

// finish is H5, and with -R the end of the test's connection.
func (r *runner) finish() error {
	if _, err := r.ch.record(r.local); err != nil { // H5
		if r.o.Test == Send && !r.o.Server && errors.Is(err, errPeerClosed) { // ib_send_bw's sides do not exchange -n
			err = fmt.Errorf("perftest: the server closed the connection after this side sent its %d messages: it ended with an error (see its output; ib_send_bw's sides exchange neither -n nor -s)", r.o.Iters)
		}
		return err
	}
	if r.cmc != nil {
		return r.cmc.disconnect()
	}
	return nil
}

const resultLine = "---------------------------------------------------------------------------------------"

// waitingForClient is what a server prints before it waits for its client.
const waitingForClient = "\n************************************\n* Waiting for client to connect... *\n************************************"

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
		fmt.Fprintln(out, waitingForClient)
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
	}
	if o.Server && o.Test.sends() {
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
