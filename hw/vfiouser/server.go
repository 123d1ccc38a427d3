package vfiouser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/internal/sockguard"
	"golang.org/x/sys/unix"
)

// Config sets up a Server.
type Config struct {
	// SocketPath is where Listen binds. A stale socket file there (one nobody
	// answers on) is replaced.
	SocketPath string
	// Logger receives the server's structured logs; nil discards them.
	Logger *slog.Logger
	// MaxMsgFDs is the most descriptors one message may carry (VERSION's max_msg_fds);
	// 0 means 16, QEMU's own.
	MaxMsgFDs int
	// MaxDataXfer is the largest REGION_READ/WRITE count (max_data_xfer_size); 0 means 1 MiB.
	MaxDataXfer int
	// ClientGone, if set, is called each time a client has gone, once everything it gave is
	// released and the device reset, with what ended its connection (nil: it hung up, or the
	// server stopped). It reports the departure in place of the server's "client gone" line,
	// so that its owner can say there what it knows (what the process holds by then, say).
	ClientGone func(err error)
	// Guard, if set, is lent each connection while it is served, to end it cleanly should this
	// process die: a sockguard.Guard. Without one, a server killed with a request unread resets
	// the connection, and QEMU 11.1 aborts on the reset (see internal/sockguard).
	Guard ConnGuard
	// HandshakeTimeout is how long a client that connected has to complete the VERSION
	// exchange; one that has not by then is dropped, so that a client that says nothing (or
	// nothing in vfio-user) cannot keep the one client slot from QEMU. 0 means
	// DefaultHandshakeTimeout. Once the exchange is done the client may idle for ever.
	HandshakeTimeout time.Duration
}

// slowReply is how long a request may take before the server says so: QEMU waits 5 s for a
// reply (x-msg-timeout), and the request after a posted write waits for that write too.
const slowReply = 2 * time.Second

// DefaultHandshakeTimeout is HandshakeTimeout's default. QEMU sends VERSION as soon as it has
// connected and gives up on a reply after its x-msg-timeout of 5 s; a QEMU queued behind a
// silent client is served before then.
const DefaultHandshakeTimeout = 3 * time.Second

// ErrNoVersion is what ends the connection of a client that did not begin with a VERSION the
// server accepts, in time (ServeConn's error, and ClientGone's): wrapped with what it sent.
var ErrNoVersion = errors.New("vfiouser: the client did not begin with a vfio-user VERSION")

// ConnGuard holds a copy of a connection from Hold until release is called.
type ConnGuard interface {
	Hold(conn syscall.Conn) (release func(), err error)
}

// Server serves a Device to one vfio-user client at a time.
type Server struct {
	dev         Device
	desc        Description
	log         *slog.Logger
	path        string
	maxFDs      int
	maxDataXfer int
	maxMsg      int
	clientGone  func(error)
	guard       ConnGuard
	// handshakeTimeout is Config.HandshakeTimeout, defaulted.
	handshakeTimeout time.Duration

	irqs *irqTable

	serving sync.Mutex // held while a connection is served: one client at a time

	mu     sync.Mutex
	closed bool
	ln     *net.UnixListener  // from Listen
	cancel context.CancelFunc // of the running ListenAndServe
	done   chan struct{}      // closed when ListenAndServe returns
}

// Limits on a device description QEMU accepts (it refuses more).
const (
	maxRegions = 100
	maxIRQs    = 50
)

// New returns a server for dev.
func New(cfg Config, dev Device) (*Server, error) {
	if dev == nil {
		return nil, errors.New("vfiouser: no device")
	}
	if cfg.MaxMsgFDs == 0 {
		cfg.MaxMsgFDs = 16
	}
	if cfg.MaxDataXfer == 0 {
		cfg.MaxDataXfer = 1 << 20
	}
	if cfg.MaxMsgFDs < 1 || cfg.MaxMsgFDs > 253 || cfg.MaxDataXfer < 8 || cfg.MaxDataXfer > 64<<20 {
		return nil, fmt.Errorf("vfiouser: MaxMsgFDs %d (1..253) or MaxDataXfer %d (8..64 MiB) out of range", cfg.MaxMsgFDs, cfg.MaxDataXfer)
	}
	if cfg.HandshakeTimeout < 0 {
		return nil, fmt.Errorf("vfiouser: HandshakeTimeout %v is negative", cfg.HandshakeTimeout)
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	desc := dev.Describe()
	if len(desc.Regions) > maxRegions || len(desc.IRQs) > maxIRQs {
		return nil, fmt.Errorf("vfiouser: %d regions, %d IRQ indices: QEMU accepts at most %d and %d", len(desc.Regions), len(desc.IRQs), maxRegions, maxIRQs)
	}
	for i, r := range desc.Regions {
		if r.Mmap == nil {
			continue
		}
		if r.Mmap.File == nil || len(r.Mmap.Areas) == 0 {
			return nil, fmt.Errorf("vfiouser: region %d: mmap without a file or areas", i)
		}
		for _, a := range r.Mmap.Areas {
			if a.Size == 0 || a.Offset > r.Size || a.Size > r.Size-a.Offset || a.Offset%pageSize != 0 || a.Size%pageSize != 0 {
				return nil, fmt.Errorf("vfiouser: region %d: sparse area [0x%x, +0x%x) not page-aligned inside the region", i, a.Offset, a.Size)
			}
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		dev: dev, desc: desc, log: log, path: cfg.SocketPath,
		maxFDs: cfg.MaxMsgFDs, maxDataXfer: cfg.MaxDataXfer,
		maxMsg:           HeaderSize + regionRWSize + cfg.MaxDataXfer + 4096,
		clientGone:       cfg.ClientGone,
		guard:            cfg.Guard,
		handshakeTimeout: cfg.HandshakeTimeout,
		irqs:             newIRQTable(desc.IRQs),
	}, nil
}

// Listen binds Config.SocketPath; once it returns, a client may connect (Serve accepts it).
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ln != nil {
		return errors.New("vfiouser: server closed or already listening")
	}
	ln, err := listen(s.path)
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(true)
	s.ln = ln
	s.log.Info("vfio-user server listening", "socket", s.path)
	return nil
}

// ListenAndServe is Listen followed by Serve.
func (s *Server) ListenAndServe(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Serve serves the clients that connect to the socket Listen bound, one after another, until
// ctx ends or Close is called; then it returns nil after releasing the client it was serving
// and removing the socket file.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	ln := s.ln
	if s.closed || ln == nil || s.cancel != nil {
		s.mu.Unlock()
		return errors.New("vfiouser: Serve without Listen, after Close, or twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	s.cancel, s.done = cancel, make(chan struct{})
	s.mu.Unlock()
	defer close(s.done)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("vfiouser: accept: %w", err)
		}
		if err := s.ServeConn(ctx, conn); err != nil {
			s.log.Warn("client connection ended", "err", err)
		}
	}
}

// listen binds path, replacing a socket file nobody listens on any more.
func listen(path string) (*net.UnixListener, error) {
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	if fi, serr := os.Lstat(path); serr != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil, err
	}
	if c, derr := net.DialUnix("unix", nil, addr); derr == nil {
		c.Close()
		return nil, fmt.Errorf("vfiouser: %s: a server is already listening: %w", path, err)
	}
	os.Remove(path)
	return net.ListenUnix("unix", addr)
}

// Close stops Serve and waits until it has released its client and removed the socket.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	cancel, done, ln := s.cancel, s.done, s.ln
	s.mu.Unlock()
	if cancel == nil && ln != nil {
		ln.Close() // listening, never served
	}
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// ServeConn serves one client on conn until it goes (EOF, error) or ctx ends, then releases
// everything the client gave: every DMA region (the device is told first), every eventfd; and
// resets the device. The client's first message must be a VERSION the server accepts, whole
// within HandshakeTimeout: else it gets an error reply (when it sent a header to reply to) and
// is dropped, with an error wrapping ErrNoVersion.
// It closes conn, shut down and drained first, so that the client reads end of file and not a
// reset. Connections are served one at a time: a second ServeConn waits for the first.
// It returns nil when the client hung up.
func (s *Server) ServeConn(ctx context.Context, conn *net.UnixConn) error {
	s.serving.Lock()
	defer s.serving.Unlock()
	// A shutdown, not a close, ends the loop's read: what the client sent meanwhile is drained
	// before the close.
	stop := context.AfterFunc(ctx, func() { sockguard.Shutdown(conn) })
	defer stop()
	c := &session{s: s, conn: conn, unguard: func() {}}
	if s.guard != nil {
		release, err := s.guard.Hold(conn)
		if err != nil {
			s.log.Warn("connection not guarded: if this process dies, its client may see a reset", "err", err)
		} else {
			c.unguard = release
		}
	}
	s.log.Info("client connected")
	err := c.loop()
	c.release()
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || ctx.Err() != nil {
		err = nil
	}
	if s.clientGone != nil {
		s.clientGone(err)
	} else {
		s.log.Info("client gone", "err", err)
	}
	return err
}

// session is one client's connection and what it gave.
type session struct {
	s       *Server
	conn    *net.UnixConn
	unguard func() // gives the guard's copy of conn back
	dma     dmaTable
	oob     []byte
	hdr     [HeaderSize]byte
	buf     []byte
	got     int // bytes read from the client so far
}

// release gives back what the client gave and resets the device: a client that goes leaves
// nothing behind (its machine is gone, its driver with it), and the next one finds the device
// as at power-on.
func (c *session) release() {
	sockguard.CloseConn(c.conn)
	c.unguard()
	c.s.unmapAll(&c.dma)
	if err := c.s.dev.Reset(); err != nil {
		c.s.log.Warn("device reset after the client left", "err", err)
	}
	c.s.irqs.closeAll()
}

func (c *session) loop() error {
	c.oob = make([]byte, unix.CmsgSpace(4*(c.s.maxFDs+8)))
	if err := c.handshake(); err != nil {
		return err
	}
	for {
		h, body, fds, bad, err := c.read()
		if err != nil {
			sockguard.CloseFDs(fds)
			return err
		}
		var reply []byte
		var replyFD int = -1
		if bad != nil {
			sockguard.CloseFDs(fds)
		} else {
			start := time.Now()
			reply, replyFD, bad = c.s.handle(&c.dma, h, body, fds)
			if took := time.Since(start); took > slowReply {
				// QEMU gives up on a reply after 5 s and then loses its place in the stream:
				// what held this one up is worth knowing.
				c.s.log.Warn("slow request", "cmd", h.Cmd.String(), "id", h.ID, "took", took)
			}
		}
		if err := c.respond(h, reply, replyFD, bad); err != nil {
			return err
		}
	}
}

// handshake serves the client's first message, which must be a VERSION the server accepts,
// read and answered within the handshake timeout. It returns nil once the exchange is done (and
// the deadline lifted), the connection's error if the client went, or an ErrNoVersion.
func (c *session) handshake() error {
	timeout := c.s.handshakeTimeout
	if err := c.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	fds, err := c.readFull(c.hdr[:], nil)
	var h Header
	var body []byte
	var bad error
	if err == nil {
		h = parseHeader(c.hdr[:])
		switch {
		case h.Size < HeaderSize:
			bad = refuse(syscall.EINVAL, "message size %d is shorter than its header", h.Size)
		case int64(h.Size) > int64(c.s.maxMsg):
			bad = refuse(syscall.E2BIG, "message size %d is over the limit %d", h.Size, c.s.maxMsg)
		default:
			if cap(c.buf) < int(h.Size)-HeaderSize {
				c.buf = make([]byte, int(h.Size)-HeaderSize)
			}
			body = c.buf[:int(h.Size)-HeaderSize]
			fds, err = c.readFull(body, fds)
		}
	}
	if err != nil {
		sockguard.CloseFDs(fds)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w: none within %v, and it sent %s", ErrNoVersion, timeout, c.sent())
		}
		return err
	}
	var reply []byte
	switch {
	case bad != nil:
		sockguard.CloseFDs(fds)
	case h.Cmd != CmdVersion:
		sockguard.CloseFDs(fds)
		bad = refuse(syscall.EINVAL, "%s before VERSION: the first message must be VERSION", h.Cmd)
	case h.Flags&FlagNoReply != 0:
		sockguard.CloseFDs(fds)
		bad = refuse(syscall.EINVAL, "VERSION asking for no reply")
	default:
		reply, _, bad = c.s.handle(&c.dma, h, body, fds)
	}
	if err := c.respond(h, reply, -1, bad); err != nil && bad == nil {
		return err
	}
	if bad != nil {
		return fmt.Errorf("%w: its first message (%s, id %d) was refused: %v", ErrNoVersion, h.Cmd, h.ID, bad)
	}
	return c.conn.SetDeadline(time.Time{})
}

// sent describes what the client has sent so far, for the log of a client dropped before its
// VERSION.
func (c *session) sent() string {
	switch {
	case c.got == 0:
		return "nothing"
	case c.got <= HeaderSize:
		return fmt.Sprintf("%d bytes, %q", c.got, c.hdr[:c.got])
	}
	return fmt.Sprintf("%d bytes, beginning %q", c.got, c.hdr[:])
}

// respond sends the reply to h, or the error reply for bad, unless the client asked for none.
func (c *session) respond(h Header, reply []byte, fd int, bad error) error {
	if bad != nil {
		c.s.log.Warn("request refused", "cmd", h.Cmd.String(), "id", h.ID, "err", bad)
	} else if c.s.log.Enabled(context.Background(), slog.LevelDebug) {
		c.s.log.Debug("request", "cmd", h.Cmd.String(), "id", h.ID, "size", h.Size, "reply", len(reply), "fd", fd >= 0)
	}
	if h.Flags&FlagNoReply != 0 {
		return nil
	}
	msg := encodeReply(h, reply, bad)
	var oob []byte
	if fd >= 0 && bad == nil {
		oob = unix.UnixRights(fd)
	}
	return writeMsg(c.conn, msg, oob)
}

// encodeReply builds the reply to h: the bare header with the errno when bad is set.
func encodeReply(h Header, body []byte, bad error) []byte {
	r := Header{ID: h.ID, Cmd: h.Cmd, Flags: FlagReply}
	if bad != nil {
		r.Flags |= FlagError
		r.Errno = uint32(errnoOf(bad))
		body = nil
	}
	msg := make([]byte, HeaderSize+len(body))
	r.Size = uint32(len(msg))
	r.put(msg)
	copy(msg[HeaderSize:], body)
	return msg
}

// read reads one message. A message whose header is malformed (size below the header's or
// above the limit) comes back with bad set and as much of it consumed as keeps the stream in
// step: nothing past the header for a short size, the declared bytes for a long one. err is
// set only when the connection is unusable.
func (c *session) read() (h Header, body []byte, fds []int, bad, err error) {
	fds, err = c.readFull(c.hdr[:], nil)
	if err != nil {
		return h, nil, fds, nil, err
	}
	h = parseHeader(c.hdr[:])
	switch {
	case h.Size < HeaderSize:
		return h, nil, fds, refuse(syscall.EINVAL, "message size %d is shorter than its header", h.Size), nil
	case int64(h.Size) > int64(c.s.maxMsg):
		// Drain the declared bytes in pieces so that the next message is read from its start.
		n := int64(h.Size) - HeaderSize
		chunk := make([]byte, 64<<10)
		for n > 0 && err == nil {
			k := min(n, int64(len(chunk)))
			fds, err = c.readFull(chunk[:k], fds)
			n -= k
		}
		return h, nil, fds, refuse(syscall.E2BIG, "message size %d is over the limit %d", h.Size, c.s.maxMsg), err
	}
	n := int(h.Size) - HeaderSize
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	body = c.buf[:n]
	fds, err = c.readFull(body, fds)
	if err == nil && len(fds) > c.s.maxFDs {
		bad = refuse(syscall.EINVAL, "%d fds, more than max_msg_fds %d", len(fds), c.s.maxFDs)
	}
	return h, body, fds, bad, err
}

// readFull fills b, collecting the descriptors that come with it onto fds.
func (c *session) readFull(b []byte, fds []int) ([]int, error) {
	for len(b) > 0 {
		n, oobn, flags, _, err := c.conn.ReadMsgUnix(b, c.oob)
		if oobn > 0 {
			fds = append(fds, sockguard.Rights(c.oob[:oobn])...)
		}
		if n > 0 {
			c.got += n
		}
		if err != nil {
			return fds, err
		}
		if n == 0 {
			return fds, io.EOF
		}
		if flags&unix.MSG_CTRUNC != 0 {
			// The kernel dropped descriptors that did not fit: more than any message may carry.
			fds = append(fds, -1)
		}
		b = b[n:]
	}
	return fds, nil
}

// versionJSON is the capabilities the server offers, most complete first: the reply must be
// no larger than the request (QEMU sizes its receive buffer from its own message), so a
// shorter request gets a shorter offer.
func (s *Server) versionJSON() [][]byte {
	type caps struct {
		MaxMsgFDs       int  `json:"max_msg_fds"`
		MaxDataXferSize int  `json:"max_data_xfer_size,omitempty"`
		Pgsizes         int  `json:"pgsizes"`
		MaxDMAMaps      int  `json:"max_dma_maps,omitempty"`
		WriteMultiple   bool `json:"write_multiple"`
	}
	var out [][]byte
	for _, c := range []caps{
		{s.maxFDs, s.maxDataXfer, pageSize, maxDMAMaps, true},
		{s.maxFDs, s.maxDataXfer, pageSize, 0, true},
		{s.maxFDs, 0, pageSize, 0, true},
	} {
		b, _ := json.Marshal(map[string]caps{"capabilities": c})
		out = append(out, append(b, 0))
	}
	return out
}

// handle decodes and carries out one well-framed request: the reply's body, a descriptor to
// send with it (-1 for none), or the error for an error reply. It owns fds: each is either
// kept (an eventfd assigned to a vector) or closed before it returns.
func (s *Server) handle(t *dmaTable, h Header, body []byte, fds []int) (reply []byte, replyFD int, bad error) {
	r := &request{t: t, cmd: h.Cmd, body: body, fds: fds}
	defer func() {
		if !r.kept {
			sockguard.CloseFDs(fds)
		}
	}()
	if err := checkCommand(h, len(fds)); err != nil {
		return nil, -1, err
	}
	run, ok := commands[h.Cmd]
	if !ok {
		return nil, -1, refuse(syscall.ENOSYS, "unsupported command %s", h.Cmd)
	}
	return run(s, r)
}

// checkCommand refuses a message that is not a command, flags it cannot have, and
// descriptors with a command that takes none.
func checkCommand(h Header, nfds int) error {
	switch {
	case h.Flags&FlagTypeMask != FlagCommand:
		return refuse(syscall.EINVAL, "message type %d from the client is not a command", h.Flags&FlagTypeMask)
	case h.Flags&^(FlagTypeMask|FlagNoReply) != 0:
		return refuse(syscall.EINVAL, "header flags 0x%x", h.Flags)
	case nfds > 0 && h.Cmd != CmdDMAMap && h.Cmd != CmdSetIRQs:
		return refuse(syscall.EINVAL, "%s carries %d fds", h.Cmd, nfds)
	}
	return nil
}

// request is one command being handled.
type request struct {
	t    *dmaTable
	cmd  Command
	body []byte
	fds  []int
	kept bool // the command kept fds: handle does not close them
}

// command carries out one command: the reply's body, a descriptor to send with it (-1 for
// none), or the error for an error reply.
type command func(s *Server, r *request) (reply []byte, replyFD int, err error)

// commands are the commands the server answers; any other gets ENOSYS.
var commands = map[Command]command{
	CmdVersion: func(s *Server, r *request) ([]byte, int, error) { return s.version(r.body) },
	CmdDMAMap:  (*Server).dmaMap,
	CmdDMAUnmap: func(s *Server, r *request) ([]byte, int, error) {
		if err := r.sized(dmaUnmapSize, true); err != nil {
			return nil, -1, err
		}
		m := dmaUnmapMsg{argszView(r.body)}
		if err := s.unmapDMA(r.t, m.iova(), m.size(), m.flags()); err != nil {
			return nil, -1, err
		}
		return r.body, -1, nil
	},
	CmdDeviceGetInfo: func(s *Server, r *request) ([]byte, int, error) {
		if err := r.sized(deviceInfoSize, false); err != nil {
			return nil, -1, err
		}
		m := deviceInfoMsg{make(argszView, deviceInfoSize)}
		m.setArgsz(deviceInfoSize)
		m.setFlags(s.desc.Flags)
		m.setNumRegions(uint32(len(s.desc.Regions)))
		m.setNumIRQs(uint32(len(s.desc.IRQs)))
		return m.argszView, -1, nil
	},
	CmdRegionInfo: (*Server).regionInfo,
	CmdIRQInfo:    (*Server).irqInfo,
	CmdSetIRQs: func(s *Server, r *request) ([]byte, int, error) {
		if len(r.body) < irqSetSize || int(argsz(r.body)) != len(r.body) {
			return nil, -1, refuse(syscall.EINVAL, "DEVICE_SET_IRQS of %d bytes, argsz %d", len(r.body), argsz(r.body))
		}
		var err error
		r.kept, err = s.setIRQs(irqSetMsg{argszView(r.body)}, r.fds)
		return nil, -1, err
	},
	CmdRegionRead:       (*Server).regionRead,
	CmdRegionWrite:      (*Server).regionWrite,
	CmdRegionWriteMulti: func(s *Server, r *request) ([]byte, int, error) { return nil, -1, s.writeMulti(r.body) },
	CmdDeviceReset:      (*Server).reset,
}

// sized refuses a request whose body is not size bytes, or whose argsz is not size (exact) or
// is less than it.
func (r *request) sized(size int, exact bool) error {
	n := argsz(r.body)
	if len(r.body) != size || exact && n != uint32(size) || !exact && n < uint32(size) {
		return refuse(syscall.EINVAL, "%s of %d bytes, argsz %d", r.cmd, len(r.body), n)
	}
	return nil
}

// dmaMap takes DMA_MAP's descriptor, if any, for mapDMA, which closes it.
func (s *Server) dmaMap(r *request) ([]byte, int, error) {
	if err := r.sized(dmaMapSize, true); err != nil {
		return nil, -1, err
	}
	if len(r.fds) > 1 {
		return nil, -1, refuse(syscall.EINVAL, "DMA_MAP with %d fds", len(r.fds))
	}
	fd := -1
	if len(r.fds) == 1 {
		fd, r.kept = r.fds[0], true
	}
	m := dmaMapMsg{argszView(r.body)}
	return nil, -1, s.mapDMA(r.t, m.iova(), m.size(), m.offset(), m.flags(), fd)
}

func (s *Server) irqInfo(r *request) ([]byte, int, error) {
	if err := r.sized(irqInfoSize, false); err != nil {
		return nil, -1, err
	}
	index := irqInfoMsg{argszView(r.body)}.index()
	if int(index) >= len(s.desc.IRQs) {
		return nil, -1, refuse(syscall.EINVAL, "DEVICE_GET_IRQ_INFO index %d of %d", index, len(s.desc.IRQs))
	}
	irq := s.desc.IRQs[index]
	m := irqInfoMsg{make(argszView, irqInfoSize)}
	m.setArgsz(irqInfoSize)
	m.setFlags(irq.Flags & irqInfoFlags)
	m.setIndex(index)
	m.setCount(irq.Count)
	return m.argszView, -1, nil
}

func (s *Server) regionRead(r *request) ([]byte, int, error) {
	if len(r.body) != regionRWSize {
		return nil, -1, refuse(syscall.EINVAL, "REGION_READ of %d bytes", len(r.body))
	}
	m := regionRWMsg(r.body)
	off, index, count := m.offset(), m.region(), m.count()
	if err := s.checkAccess(index, off, uint64(count), RegionFlagRead); err != nil {
		return nil, -1, err
	}
	reply := make(regionRWMsg, regionRWSize+int(count))
	copy(reply, r.body)
	if err := s.dev.RegionRead(index, off, reply.data()); err != nil {
		return nil, -1, refuse(errnoOf(err), "REGION_READ region %d [0x%x, +%d): %v", index, off, count, err)
	}
	return reply, -1, nil
}

func (s *Server) regionWrite(r *request) ([]byte, int, error) {
	if len(r.body) < regionRWSize {
		return nil, -1, refuse(syscall.EINVAL, "REGION_WRITE of %d bytes", len(r.body))
	}
	m := regionRWMsg(r.body)
	off, index, count := m.offset(), m.region(), m.count()
	if uint64(count) != uint64(len(m.data())) {
		return nil, -1, refuse(syscall.EINVAL, "REGION_WRITE count %d with %d data bytes", count, len(m.data()))
	}
	if err := s.checkAccess(index, off, uint64(count), RegionFlagWrite); err != nil {
		return nil, -1, err
	}
	if err := s.dev.RegionWrite(index, off, m.data()); err != nil {
		return nil, -1, refuse(errnoOf(err), "REGION_WRITE region %d [0x%x, +%d): %v", index, off, count, err)
	}
	return r.body[:regionRWSize], -1, nil
}

func (s *Server) reset(r *request) ([]byte, int, error) {
	if len(r.body) != 0 {
		return nil, -1, refuse(syscall.EINVAL, "DEVICE_RESET with %d bytes", len(r.body))
	}
	if s.desc.Flags&DeviceFlagReset == 0 {
		return nil, -1, refuse(syscall.ENOTSUP, "DEVICE_RESET: the device has no reset")
	}
	if err := s.dev.Reset(); err != nil {
		return nil, -1, refuse(errnoOf(err), "DEVICE_RESET: %v", err)
	}
	return nil, -1, nil
}

func argsz(body []byte) uint32 {
	if len(body) < 4 {
		return 0
	}
	return argszView(body).argsz()
}

func (s *Server) version(body []byte) ([]byte, int, error) {
	if len(body) < 4 {
		return nil, -1, refuse(syscall.EINVAL, "VERSION of %d bytes", len(body))
	}
	if major := versionMsg(body).major(); major != 0 {
		return nil, -1, refuse(syscall.ENOTSUP, "VERSION major %d (only 0)", major)
	}
	if js := versionMsg(body).json(); len(js) > 0 {
		if js[len(js)-1] != 0 {
			return nil, -1, refuse(syscall.EINVAL, "VERSION JSON not NUL-terminated")
		}
		if !json.Valid(js[:len(js)-1]) {
			return nil, -1, refuse(syscall.EINVAL, "VERSION JSON is not valid")
		}
	}
	for _, js := range s.versionJSON() {
		if 4+len(js) <= len(body) {
			return append(make([]byte, 4), js...), -1, nil // major 0, minor 0
		}
	}
	return nil, -1, refuse(syscall.EINVAL, "VERSION request of %d bytes leaves no room for the capabilities", len(body))
}

// checkAccess checks a region access against the description before the device sees it.
func (s *Server) checkAccess(index uint32, off, count uint64, need uint32) error {
	if int(index) >= len(s.desc.Regions) {
		return refuse(syscall.EINVAL, "region %d of %d", index, len(s.desc.Regions))
	}
	r := s.desc.Regions[index]
	switch {
	case r.Flags&need == 0:
		return refuse(syscall.EINVAL, "region %d does not allow this access (flags 0x%x)", index, r.Flags)
	case count > uint64(s.maxDataXfer):
		return refuse(syscall.E2BIG, "region %d access of %d bytes, more than max_data_xfer_size %d", index, count, s.maxDataXfer)
	case off > r.Size || count > r.Size-off:
		return refuse(syscall.EINVAL, "region %d [0x%x, +%d) is past its end 0x%x", index, off, count, r.Size)
	}
	return nil
}

func (s *Server) regionInfo(q *request) ([]byte, int, error) {
	if err := q.sized(regionInfoSize, false); err != nil {
		return nil, -1, err
	}
	req := regionInfoMsg{argszView(q.body)}
	asked, index := req.argsz(), req.index()
	if int(index) >= len(s.desc.Regions) {
		return nil, -1, refuse(syscall.EINVAL, "DEVICE_GET_REGION_INFO index %d of %d", index, len(s.desc.Regions))
	}
	reg := s.desc.Regions[index]
	flags := reg.Flags & (RegionFlagRead | RegionFlagWrite)
	need := uint32(regionInfoSize)
	if reg.Mmap != nil {
		flags |= RegionFlagMmap | RegionFlagCaps
		need += sparseCapHeader + sparseAreaSize*uint32(len(reg.Mmap.Areas))
	}
	r := regionInfoMsg{make(argszView, regionInfoSize, need)}
	r.setArgsz(need)
	r.setFlags(flags)
	r.setIndex(index)
	r.setSize(reg.Size)
	if reg.Mmap == nil {
		return r.argszView, -1, nil
	}
	r.setOffset(reg.Mmap.FileOffset)
	if asked < need {
		// The client asks again with argsz = need; the reply must fit what it asked for.
		return r.argszView, -1, nil
	}
	r.setCapOffset(regionInfoSize)
	full := r.argszView[:need]
	c := sparseCapMsg(full[regionInfoSize:])
	c.setID(capSparseMmap)
	c.setVersion(capSparseMmapVer)
	c.setNext(0)
	c.setNrAreas(uint32(len(reg.Mmap.Areas)))
	for i, a := range reg.Mmap.Areas {
		c.setArea(i, a)
	}
	return full, int(reg.Mmap.File.Fd()), nil
}

func (s *Server) writeMulti(body []byte) error {
	if len(body) < 8 {
		return refuse(syscall.EINVAL, "REGION_WRITE_MULTI of %d bytes", len(body))
	}
	m := writeMultiMsg(body)
	n := m.count()
	if n == 0 || n > maxMultiWr || uint64(len(body)-8) != n*multiWrEntry {
		return refuse(syscall.EINVAL, "REGION_WRITE_MULTI of %d writes in %d bytes", n, len(body))
	}
	// Check every write before doing any, so a bad one leaves the device as it was.
	for i := range int(n) {
		w := m.entry(i)
		if w.count() > multiWrData {
			return refuse(syscall.EINVAL, "REGION_WRITE_MULTI entry of %d bytes", w.count())
		}
		if err := s.checkAccess(w.region(), w.offset(), uint64(w.count()), RegionFlagWrite); err != nil {
			return err
		}
	}
	for i := range int(n) {
		w := m.entry(i)
		off, index, count := w.offset(), w.region(), w.count()
		if err := s.dev.RegionWrite(index, off, w.data()[:count]); err != nil {
			return refuse(errnoOf(err), "REGION_WRITE_MULTI region %d [0x%x, +%d): %v", index, off, count, err)
		}
	}
	return nil
}
