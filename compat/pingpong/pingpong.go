// Package pingpong is softirdma's side of rdma-core's ibv_rc_pingpong, ibv_uc_pingpong and
// ibv_ud_pingpong: the same TCP exchange of "LID:QPN:PSN:GID" (52 bytes each way, then "done"),
// the same queue pair set-up for each transport, and the same strict SEND/RECV ping-pong, so
// either end may be one of those tools on a Linux Soft-RoCE or hardware peer.
package pingpong

import (
	"context"
	"encoding/hex"
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

// Options are the tools', with their defaults in brackets; a zero field takes its default.
type Options struct {
	// Type is the transport: engine.QPTypeRC (ibv_rc_pingpong), QPTypeUC (ibv_uc_pingpong) or
	// QPTypeUD (ibv_ud_pingpong) [RC].
	Type    engine.QPType
	Server  bool   // wait for a client [client]
	Host    string // the server to connect to, as a client
	Port    int    // TCP port [18515]
	Size    int    // message size, 1..MaxSize [4096; UD: 1024, at most the port's active MTU]
	Iters   int    // messages each way, 1..MaxIters [1000]
	RxDepth int    // receives kept posted, 1..MaxRxDepth [500]
	MTU     int    // path MTU in bytes [1024]; UD uses the port's active MTU
	// GID is the address to advertise as this side's GID (-g): an IPv4 address is sent
	// IPv4-mapped. Invalid means all zeros, which a RoCE peer cannot use.
	GID netip.Addr
	// Validate fills page starts as the client and checks them as the server (-c).
	Validate bool
	// Timeout bounds one connection attempt and the rest of the TCP exchange [30s].
	Timeout time.Duration
	// Wait keeps a client trying for this long while its server is not up yet: the connection
	// is refused, or closed or reset before the server sent its address. 0 tries once, as
	// ibv_rc_pingpong does.
	Wait time.Duration
	// Idle is how long a server waits for a connection's address before it drops the
	// connection and waits for another [10s].
	Idle time.Duration
	// Log gets one line for each connection a server drops and when a client starts waiting;
	// nil discards them.
	Log io.Writer
	// QPTimeout is the local ACK timeout exponent (4.096 us x 2^n; 0 waits forever), 0..31, and
	// RetryCount the retries after a timeout, 0..7; nil is the tool's 14 and 7.
	QPTimeout, RetryCount *int
	// Rand chooses the PSN; nil is unpredictable.
	Rand mrand.Source
	// LastSend, if set, runs just before the last SEND is posted. A link that loses frames on
	// purpose stops there: ibv_rc_pingpong exits once its own messages are done, so an
	// acknowledgement of this side's last SEND that is lost would have its retransmissions
	// find nobody to answer them, and the run would end RETRY_EXC_ERR.
	LastSend func()
}

// Limits of the options: ibv_rc_pingpong itself takes any unsigned value; these keep a run within
// sensible memory (one buffer of Size bytes) and the device's queue sizes.
const (
	MaxSize    = 8 << 20
	MaxIters   = 100_000_000
	MaxRxDepth = 16384
)

func (o *Options) defaults() {
	ctrl.Default(&o.Type, engine.QPTypeRC)
	ctrl.Default(&o.Port, 18515)
	if o.Type == engine.QPTypeUD {
		ctrl.Default(&o.Size, 1024)
	}
	ctrl.Default(&o.Size, 4096)
	ctrl.Default(&o.Iters, 1000)
	ctrl.Default(&o.RxDepth, 500)
	ctrl.Default(&o.MTU, 1024)
	ctrl.Default(&o.Timeout, 30*time.Second)
}

// check refuses what the run cannot do, before it allocates anything.
func (o *Options) check() error {
	if o.Type != engine.QPTypeRC && o.Type != engine.QPTypeUC && o.Type != engine.QPTypeUD {
		return fmt.Errorf("pingpong: transport %s is not RC, UC or UD", o.Type)
	}
	if err := ctrl.OutOfRange("pingpong", append([]ctrl.Range{
		{What: "port", V: o.Port, Lo: 1, Hi: 65535},
		{What: "size", V: o.Size, Lo: 1, Hi: MaxSize},
		{What: "iterations", V: o.Iters, Lo: 1, Hi: MaxIters},
		{What: "receive depth", V: o.RxDepth, Lo: 1, Hi: MaxRxDepth},
	}, ctrl.QPRanges(o.QPTimeout, o.RetryCount)...)...); err != nil {
		return err
	}
	if o.Timeout < 0 || o.Wait < 0 || o.Idle < 0 {
		return errors.New("pingpong: negative timeout")
	}
	if _, ok := engine.MTUOf(o.MTU); !ok {
		return fmt.Errorf("pingpong: MTU %d is not one of 256, 512, 1024, 2048, 4096", o.MTU)
	}
	if !o.Server && o.Host == "" {
		return errors.New("pingpong: a client needs a server to connect to")
	}
	return nil
}

// ErrFlushed is in the error of a run whose QP went to the error state with nothing but
// flushed completions to say so.
var ErrFlushed = ctrl.ErrFlushed

// Dest is one side's address message.
type Dest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID [16]byte
}

// MessageLen is the length of the address message: 51 characters and a NUL.
const MessageLen = 52

// QKey is the Q_Key ibv_ud_pingpong gives its QP and every datagram it sends.
const QKey = 0x11111111

// Marshal renders the message as ibv_rc_pingpong writes it: "%04x:%06x:%06x:%s" with the GID as
// 32 hex digits, NUL-terminated.
func (d Dest) Marshal() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN, d.PSN, hex.EncodeToString(d.GID[:]))
	return append([]byte(s), 0)
}

// ParseDest reads a message the way the tool does (%x fields, the GID 8 hex digits at a time).
func ParseDest(b []byte) (Dest, error) {
	var d Dest
	s := string(b)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ":")
	if len(parts) != 4 || len(parts[3]) != 32 {
		return d, fmt.Errorf("pingpong: bad address message %q", s)
	}
	var vals [3]uint64
	for i := range vals {
		v, err := strconv.ParseUint(parts[i], 16, 32)
		if err != nil {
			return d, fmt.Errorf("pingpong: bad address message %q", s)
		}
		vals[i] = v
	}
	if vals[0] > 0xffff || vals[1] > 0xffffff || vals[2] > 0xffffff {
		return d, fmt.Errorf("pingpong: address message out of range %q", s)
	}
	g, err := hex.DecodeString(parts[3])
	if err != nil {
		return d, fmt.Errorf("pingpong: bad GID in %q", s)
	}
	d.LID, d.QPN, d.PSN = uint16(vals[0]), uint32(vals[1]), uint32(vals[2])
	copy(d.GID[:], g)
	return d, nil
}

// GIDString prints a GID as the tool does (inet_ntop of the 16 bytes).
func GIDString(g [16]byte) string {
	return netip.AddrFrom16(g).String()
}

// Result is what a run measured.
type Result struct {
	Bytes   int64
	Elapsed time.Duration
	Iters   int
	// PageErrors counts the pages that failed -c validation (server only).
	PageErrors int
	// QP is the queue pair's attributes once it was connected (ibv_query_qp).
	QP engine.QPAttr
}

// Run runs one side of the ping-pong on dev, printing what ibv_rc_pingpong prints to out.
func Run(ctx context.Context, dev *engine.Device, o Options, out io.Writer) (Result, error) {
	o.defaults()
	if err := o.check(); err != nil {
		return Result{}, err
	}
	mtu, _ := engine.MTUOf(o.MTU)
	ud := o.Type == engine.QPTypeUD
	if active := dev.ActiveMTU().Bytes(); ud && o.Size > active {
		return Result{}, fmt.Errorf("pingpong: requested size larger than port MTU (%d)", active)
	}
	s := &side{o: o, ctx: ctx, dev: dev, out: out, mtu: mtu, ud: ud, start: time.Now()}
	if ud {
		s.grh = engine.GRHLen
	}
	if err := s.createQP(); err != nil {
		return s.res, err
	}
	defer s.qp.Destroy()
	if err := s.prepare(); err != nil {
		return s.res, err
	}
	if err := s.exchange(); err != nil {
		return s.res, err
	}
	elapsed, err := s.pingPong()
	if err != nil {
		return s.res, err
	}
	s.report(elapsed)
	// The peer's last SEND was ACKed when it arrived, but the wire may have lost that ACK: the
	// peer then sends again after its ACK timeout, and a QP already gone leaves it to fail with
	// RETRY_EXC_ERR. So the QP stays until the link has been quiet for twice this side's ACK
	// timeout (the peer's is not exchanged; tools set both alike), at most lingerMax.
	// UC and UD send nothing again.
	if o.Type == engine.QPTypeRC {
		exp := ctrl.OrDefault(o.QPTimeout, engine.DefaultTimeout)
		if exp == 0 {
			exp = engine.DefaultTimeout
		}
		lingerQuiet(ctx, dev, 2*(4096*time.Nanosecond<<exp), lingerMax)
	}
	return s.res, nil
}

// side is one side's run of the ping-pong.
type side struct {
	o     Options
	ctx   context.Context
	dev   *engine.Device
	out   io.Writer
	mtu   engine.MTU
	ud    bool
	start time.Time // of the run, for the message when it is stopped
	// grh is where a message starts in the buffer: UD receives put the GRH area first.
	grh  int
	pd   *engine.PD
	cq   *engine.CQ
	qp   *engine.QP
	wake chan struct{}
	buf  []byte
	mr   *engine.MR
	// recvSGL takes the whole buffer (with the GRH area for UD); sendSGL the message.
	recvSGL, sendSGL []engine.SGE
	posted           int // receives posted and not completed
	local, rem       Dest
	ah               *engine.AH // UD: the peer's address
	res              Result
}

// The work requests' IDs.
const recvID, sendID = 1, 2

// createQP makes the PD, the CQ and the QP: one SEND outstanding, RxDepth receives.
func (s *side) createQP() error {
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	if s.cq, err = s.dev.CreateCQ(s.o.RxDepth + 1); err != nil {
		return err
	}
	s.wake = make(chan struct{}, 1)
	s.cq.OnCompletion(func() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	})
	s.qp, err = s.pd.CreateQP(engine.QPInitAttr{Type: s.o.Type, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: engine.QPCap{MaxSendWR: 1, MaxRecvWR: s.o.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	return err
}

// prepare registers the buffer, takes the QP to INIT, posts the receives, and prints this side's
// address.
func (s *side) prepare() error {
	s.buf = make([]byte, s.grh+s.o.Size)
	for i := range s.buf {
		s.buf[i] = 0x7b
	}
	var err error
	if s.mr, err = s.pd.RegMR(s.buf, engine.AccessLocalWrite); err != nil {
		return err
	}
	init := engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrAccessFlags
	if s.ud {
		init = engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrQKey
	}
	if err := s.qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, QKey: QKey}, init); err != nil {
		return err
	}
	s.recvSGL = []engine.SGE{{Addr: s.mr.Addr(), Length: uint32(s.grh + s.o.Size), LKey: s.mr.LKey()}}
	s.sendSGL = []engine.SGE{{Addr: s.mr.Addr() + uint64(s.grh), Length: uint32(s.o.Size), LKey: s.mr.LKey()}}
	if err := s.postRecvs(s.o.RxDepth); err != nil {
		return err
	}
	src := s.o.Rand
	if src == nil {
		src = mrand.NewPCG(uint64(time.Now().UnixNano()), uint64(s.qp.Num()))
	}
	s.local = Dest{QPN: s.qp.Num(), PSN: uint32(mrand.New(src).Uint64() & 0xffffff)}
	if s.o.GID.IsValid() {
		s.local.GID = s.o.GID.As16()
	}
	sep := ","
	if s.ud {
		sep = ":" // ibv_ud_pingpong's own spelling
	}
	fmt.Fprintf(s.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", s.local.LID, s.local.QPN, s.local.PSN, sep, GIDString(s.local.GID))
	return nil
}

func (s *side) postRecvs(n int) error {
	for ; n > 0; n-- {
		if err := s.qp.PostRecv(engine.RecvWR{ID: recvID, SGL: s.recvSGL}); err != nil {
			return err
		}
		s.posted++
	}
	return nil
}

// exchange swaps addresses with the peer and connects the QP to it (a server before it answers,
// as the tool), then prints the peer's address.
func (s *side) exchange() error {
	var err error
	if s.o.Server {
		s.rem, err = serverExchange(s.ctx, s.o, s.local, s.connectQP)
	} else {
		s.rem, err = clientExchange(s.ctx, s.o, s.local)
		if err == nil {
			err = s.connectQP(s.rem)
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", s.rem.LID, s.rem.QPN, s.rem.PSN, GIDString(s.rem.GID))
	return nil
}

// connectQP takes the QP through RTR and RTS to rem with the attributes each tool gives, and for
// UD makes the peer's address handle.
func (s *side) connectQP(rem Dest) error {
	dgid := netip.AddrFrom16(rem.GID).Unmap()
	if rem.GID == ([16]byte{}) {
		return errors.New("pingpong: the peer sent no GID; on RoCE both sides need -g")
	}
	if err := sameGID(s.local, rem); err != nil {
		return err
	}
	// The tool's AV says hop limit 1, but the kernel resolves a RoCE unicast path's hop
	// limit from its route (ib_resolve_eth_dmac): rxe's frames carry TTL 64, and so do these.
	av := engine.AHAttr{DGID: dgid, HopLimit: 64}
	rtr := engine.QPAttr{State: engine.QPSRTR, AH: av, PathMTU: s.mtu, DestQPN: rem.QPN, RQPSN: rem.PSN, MaxDestRdAtomic: 1, MinRNRTimer: engine.DefaultMinRNRTimer}
	rts := engine.QPAttr{State: engine.QPSRTS, Timeout: uint8(ctrl.OrDefault(s.o.QPTimeout, engine.DefaultTimeout)), RetryCnt: uint8(ctrl.OrDefault(s.o.RetryCount, engine.DefaultRetryCnt)),
		RNRRetry: engine.DefaultRNRRetry, SQPSN: s.local.PSN, MaxRdAtomic: 1}
	rtrMask, rtsMask := connectMasks(s.o.Type)
	if err := s.qp.Modify(rtr, rtrMask); err != nil {
		return fmt.Errorf("pingpong: %w", ctrl.RTRFailed(err, dgid))
	}
	if err := s.qp.Modify(rts, rtsMask); err != nil {
		return fmt.Errorf("pingpong: failed to modify QP to RTS: %w", err)
	}
	if s.ud {
		var err error
		if s.ah, err = s.pd.CreateAH(av); err != nil {
			return fmt.Errorf("pingpong: failed to create AH: %w", ctrl.RTRFailed(err, dgid))
		}
	}
	s.res.QP = s.qp.Query()
	return nil
}

// connectMasks are the attributes each tool gives on the way to RTR and RTS: UC's leave out READ
// resources and timeouts, UD's everything but the state and PSN (its peer is in each SEND,
// through an AH).
func connectMasks(t engine.QPType) (rtr, rts engine.AttrMask) {
	switch t {
	case engine.QPTypeUC:
		return engine.AttrState | engine.AttrAV | engine.AttrPathMTU | engine.AttrDestQPN | engine.AttrRQPSN, engine.AttrState | engine.AttrSQPSN
	case engine.QPTypeUD:
		return engine.AttrState, engine.AttrState | engine.AttrSQPSN
	}
	return engine.AttrState | engine.AttrAV | engine.AttrPathMTU | engine.AttrDestQPN | engine.AttrRQPSN | engine.AttrMaxDestRdAtomic | engine.AttrMinRNRTimer,
		engine.AttrState | engine.AttrTimeout | engine.AttrRetryCnt | engine.AttrRNRRetry | engine.AttrSQPSN | engine.AttrMaxQPRdAtomic
}

// send posts the next SEND; sent is how many went before it.
func (s *side) send(sent int) error {
	if sent == s.o.Iters-1 && s.o.LastSend != nil {
		s.o.LastSend()
	}
	wr := engine.SendWR{ID: sendID, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: s.sendSGL}
	if s.ud {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah, s.rem.QPN, QKey
	}
	return s.qp.PostSend(wr)
}

// pingPong is the strict ping-pong: one SEND outstanding; the next goes when it has completed
// and a receive has come in. The client starts; the server waits for a receive first. It returns
// how long the messages took.
func (s *side) pingPong() (time.Duration, error) {
	if s.o.Validate && !s.o.Server {
		for i := 0; i < s.o.Size; i += 4096 {
			s.buf[s.grh+i] = 0 // the tool writes i / page_size % sizeof(char), which is always 0
		}
	}
	const (
		sendDone = 1 << iota
		recvDone
	)
	pending := recvDone // the server has nothing outstanding and waits for a message
	if !s.o.Server {
		pending = sendDone | recvDone
	}
	begin := time.Now()
	if !s.o.Server {
		if err := s.send(0); err != nil {
			return 0, err
		}
	}
	rcnt, scnt := 0, 0
	wcs := make([]engine.WC, 16)
	for rcnt < s.o.Iters || scnt < s.o.Iters {
		n, err := s.poll(wcs, scnt, rcnt)
		if err != nil {
			return 0, err
		}
		for _, wc := range wcs[:n] {
			switch wc.WRID {
			case sendID:
				scnt++
				pending &^= sendDone
			case recvID:
				pending &^= recvDone
				rcnt++
				s.posted--
				if s.posted <= 1 {
					if err := s.postRecvs(s.o.RxDepth - s.posted); err != nil {
						return 0, err
					}
				}
			}
			if scnt < s.o.Iters && pending == 0 {
				if err := s.send(scnt); err != nil {
					return 0, err
				}
				pending = recvDone | sendDone
			}
		}
	}
	return time.Since(begin), nil
}

// poll takes the completions there are into wcs, waiting a second at most when there are none
// (sent and received are how far the ping-pong got); a completion in error ends the run.
func (s *side) poll(wcs []engine.WC, sent, received int) (int, error) {
	n := s.cq.Poll(wcs)
	if n == 0 {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return 0, fmt.Errorf("pingpong: %w with %d of %d messages sent and %d received", ctrl.Stopped(s.ctx, time.Since(s.start)), sent, s.o.Iters, received)
		case <-time.After(time.Second):
		}
		return 0, nil
	}
	if wc, failed := ctrl.FirstFailure(wcs[:n]); failed {
		if wc.Status == engine.WCWRFlushErr { // look for the completion that says why
			n += s.cq.Poll(wcs[n:])
			wc, _ = ctrl.FirstFailure(wcs[:n])
		}
		return 0, fmt.Errorf("pingpong: failed status %s (%d) for wr_id %d: %w", wc.Status, wc.Status, wc.WRID, ctrl.Why(wc))
	}
	return n, nil
}

// report prints the tool's two result lines for a ping-pong that took elapsed, and as a
// validating server the pages that came wrong.
func (s *side) report(elapsed time.Duration) {
	o := s.o
	s.res.Elapsed = elapsed
	s.res.Iters = o.Iters
	s.res.Bytes = int64(o.Size) * int64(o.Iters) * 2
	usec := float64(s.res.Elapsed.Microseconds())
	if usec == 0 {
		usec = 1
	}
	fmt.Fprintf(s.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", s.res.Bytes, usec/1e6, float64(s.res.Bytes)*8/usec)
	fmt.Fprintf(s.out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.Iters, usec/1e6, usec/float64(o.Iters))
	if o.Validate && o.Server {
		for i := 0; i < o.Size; i += 4096 {
			if s.buf[s.grh+i] != 0 {
				fmt.Fprintf(s.out, "invalid data in page %d\n", i/4096)
				s.res.PageErrors++
			}
		}
	}
}

// lingerMax bounds how long a finished side waits for its peer's retransmissions.
const lingerMax = 2 * time.Second

// lingerQuiet returns once dev has received nothing for quiet, after max, or when ctx ends.
func lingerQuiet(ctx context.Context, dev *engine.Device, quiet, max time.Duration) {
	quiet = min(quiet, max)
	deadline := time.Now().Add(max)
	last := dev.Stats().RxFrames
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := dev.Stats().RxFrames
		if n == last || !time.Now().Before(deadline) {
			return
		}
		last = n
		t.Reset(min(quiet, time.Until(deadline)))
	}
}

func clientExchange(ctx context.Context, o Options, local Dest) (Dest, error) {
	var rem Dest
	cl := ctrl.Client{Network: "tcp", Addr: net.JoinHostPort(o.Host, strconv.Itoa(o.Port)), Timeout: o.Timeout, Wait: o.Wait, Log: o.Log}
	c, err := cl.Connect(ctx, func(c *ctrl.Conn) error {
		_ = c.SetDeadline(time.Now().Add(o.Timeout))
		if _, err := c.Write(local.Marshal()); err != nil {
			return fmt.Errorf("pingpong: couldn't send local address: %w", err)
		}
		msg := make([]byte, MessageLen)
		if _, err := io.ReadFull(c, msg); err != nil {
			return fmt.Errorf("pingpong: couldn't read remote address: %w", ctrl.Silent(err, o.Timeout, c.BytesRead()))
		}
		var err error
		if rem, err = ParseDest(msg); err != nil {
			return fmt.Errorf("pingpong: the server sent %q, not an ibv_rc_pingpong address (is it ibv_rc_pingpong or softirdma pingpong, and -p its port?)",
				strings.TrimRight(string(msg), "\x00"))
		}
		return nil
	})
	if err != nil {
		return Dest{}, prefixed(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("done\x00")); err != nil {
		return Dest{}, fmt.Errorf("pingpong: couldn't send done: %w", err)
	}
	return rem, nil
}

// sameGID refuses a peer that advertises this side's own GID. A device sends frames for its own
// addresses to itself, so such a QP would never reach the peer: it is two processes given the
// same address (or, for the IPv6 GID, the same MAC), and only a distinct address helps. One
// device talking to itself is not this case: it is one process, with no exchange.
func sameGID(local, rem Dest) error {
	if local.GID != rem.GID {
		return nil
	}
	return fmt.Errorf("pingpong: the peer's GID %s is this side's own, so frames to it would loop back here: give each side its own address (-ip; for the IPv6 GID, -mac)", GIDString(rem.GID))
}

// prefixed names the package in an error from ctrl.
func prefixed(err error) error {
	if strings.HasPrefix(err.Error(), "pingpong: ") {
		return err
	}
	return fmt.Errorf("pingpong: %w", err)
}

func serverExchange(ctx context.Context, o Options, local Dest, connect func(Dest) error) (Dest, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return Dest{}, fmt.Errorf("pingpong: couldn't listen on port %d: %w", o.Port, err)
	}
	defer l.Close()
	var rem Dest
	srv := ctrl.Server{Idle: o.Idle, Log: o.Log}
	c, err := srv.Accept(ctx, l, func(c *ctrl.Conn) error {
		msg := make([]byte, MessageLen)
		if _, err := io.ReadFull(c, msg); err != nil {
			return err
		}
		var err error
		if rem, err = ParseDest(msg); err != nil {
			return fmt.Errorf("it sent %q, not an ibv_rc_pingpong address", strings.TrimRight(string(msg), "\x00"))
		}
		if rem.GID == ([16]byte{}) {
			return errors.New("the peer sent no GID; on RoCE both sides need -g")
		}
		if err := sameGID(local, rem); err != nil {
			// Answered all the same, so that the client sees the same GID and says so too
			// rather than report a server that hung up; this side waits for another client,
			// as for any connection it cannot use.
			_, _ = c.Write(local.Marshal())
			return errors.New(strings.TrimPrefix(err.Error(), "pingpong: "))
		}
		return nil
	})
	if err != nil {
		return Dest{}, prefixed(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(o.Timeout))
	// The server is at RTS before it answers, as the tool is.
	if err := connect(rem); err != nil {
		return Dest{}, err
	}
	if _, err := c.Write(local.Marshal()); err != nil {
		return Dest{}, fmt.Errorf("pingpong: couldn't send local address: %w", err)
	}
	done := make([]byte, 5)
	if _, err := io.ReadFull(c, done); err != nil {
		return Dest{}, fmt.Errorf("pingpong: couldn't read done: %w", ctrl.Silent(err, o.Timeout, c.BytesRead()-MessageLen))
	}
	return rem, nil
}
