// Package ctrl is the TCP control connection rdma-core's tools open before any RDMA traffic, as
// softirdma's peers of them run it: a server that is not ended by a stray or malformed connection
// (a port scan, a client of another tool or version) and a client that fails at once when nobody
// listens, or, when asked to wait, keeps trying while its server is not up yet; how both report
// a failed work completion; and the range checks their options share.
package ctrl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
)

// DefaultIdle is how long a server waits for the first message of a connection before it drops
// it as idle.
const DefaultIdle = 10 * time.Second

// Conn is a control connection that counts what it has read, so that a failure can say whether
// the peer sent anything at all.
type Conn struct {
	net.Conn
	read int
}

func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read += n
	return n, err
}

// CloseWrite shuts down the writing side of a TCP connection, so that the peer reads to its end.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// BytesRead is the number of bytes read from the peer so far.
func (c *Conn) BytesRead() int { return c.read }

// Client is how a client reaches its server.
type Client struct {
	Network string        // "tcp" or "tcp4"
	Addr    string        // host:port
	Timeout time.Duration // one connection attempt; 0 leaves it to the system
	// Wait keeps a client trying for this long while the server is not there yet: the connection
	// is refused, or it is reset or closed before the server sent anything (QEMU's user-mode
	// forward accepts and then resets when nothing listens in the guest). 0 tries once.
	Wait time.Duration
	// Log gets one line when the client starts waiting; nil discards it.
	Log io.Writer
}

// Connect dials the server and runs first, the start of the exchange up to the server's first
// message, on the connection. With Wait it tries again while the server is not there yet.
func (cl Client) Connect(ctx context.Context, first func(*Conn) error) (*Conn, error) {
	until := time.Now().Add(cl.Wait)
	said := false
	for {
		c, err := cl.try(ctx, first)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("couldn't connect to %s within %v", cl.Addr, Round(time.Since(until.Add(-cl.Wait))))
			}
			return nil, fmt.Errorf("interrupted while connecting to %s", cl.Addr)
		}
		var nr notThere
		if cl.Wait <= 0 || !errors.As(err, &nr) || time.Now().After(until) {
			return nil, err
		}
		if !said && cl.Log != nil {
			fmt.Fprintf(cl.Log, "waiting up to %v for the server at %s (%v)\n", cl.Wait, cl.Addr, Reason(nr.err))
			said = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// notThere is a failure that waiting may cure: the server is not listening (yet).
type notThere struct{ err error }

func (e notThere) Error() string { return e.err.Error() }
func (e notThere) Unwrap() error { return e.err }

func (cl Client) try(ctx context.Context, first func(*Conn) error) (*Conn, error) {
	d := net.Dialer{Timeout: cl.Timeout}
	nc, err := d.DialContext(ctx, cl.Network, cl.Addr)
	if err != nil {
		err = &ConnectError{Addr: cl.Addr, Err: err}
		if isNotFound(err) {
			return nil, err
		}
		return nil, notThere{err}
	}
	c := &Conn{Conn: nc}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	if err := first(c); err != nil {
		nc.Close()
		if c.read == 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
			errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
			return nil, notThere{fmt.Errorf("the server at %s closed the connection before it sent anything", cl.Addr)}
		}
		return nil, err
	}
	return c, nil
}

// ConnectError is a failed connection to a server, worded as ibv_rc_pingpong words it.
type ConnectError struct {
	Addr string
	Err  error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("couldn't connect to %s: %s", e.Addr, Reason(e.Err))
}
func (e *ConnectError) Unwrap() error { return e.Err }

func isNotFound(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// Reason is err without the wrappers that repeat what a message already says ("dial tcp
// 127.0.0.1:18515: connect: connection refused" is "connection refused").
func Reason(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		err = op.Err
	}
	var sys *os.SyscallError
	if errors.As(err, &sys) {
		err = sys.Err
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return "no such host"
	}
	return err.Error()
}

// Server is how a server waits for its client.
type Server struct {
	// Idle is how long a connection may stay silent before the server drops it [DefaultIdle].
	Idle time.Duration
	// Log gets one line for every connection the server drops; nil discards them.
	Log io.Writer
}

// Accept waits on l for a client whose connection passes first, the start of the exchange up to
// and including the client's first message. A connection that fails it (closes, stays silent,
// sends something else) is dropped with one line on Log and the server goes on waiting, until ctx
// ends. The connection returned has no deadline.
func (s Server) Accept(ctx context.Context, l net.Listener, first func(*Conn) error) (*Conn, error) {
	idle := s.Idle
	if idle <= 0 {
		idle = DefaultIdle
	}
	start := time.Now()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	dropped := 0
	for {
		nc, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				err = errors.New("interrupted while waiting for a client")
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					err = fmt.Errorf("no client connected within %v", Round(time.Since(start)))
				}
				if dropped > 0 {
					err = fmt.Errorf("%w (%d connection(s) dropped)", err, dropped)
				}
				return nil, err
			}
			return nil, fmt.Errorf("accept: %w", err)
		}
		c := &Conn{Conn: nc}
		_ = nc.SetDeadline(time.Now().Add(idle))
		end := context.AfterFunc(ctx, func() { nc.Close() })
		err = first(c)
		end()
		if err == nil {
			_ = nc.SetDeadline(time.Time{})
			return c, nil
		}
		nc.Close()
		var f fatal
		if errors.As(err, &f) {
			return nil, f.err
		}
		if ctx.Err() != nil {
			continue // Accept reports it
		}
		dropped++
		if s.Log != nil {
			fmt.Fprintf(s.Log, "dropped a connection from %s: %s; still waiting for a client\n", nc.RemoteAddr(), whyDropped(c, err, idle))
		}
	}
}

// Fatal marks an error of first, in Server.Accept, as this side's own failure rather than the
// connection's: Accept returns it instead of dropping the connection and waiting for another.
func Fatal(err error) error { return fatal{err} }

type fatal struct{ err error }

func (e fatal) Error() string { return e.err.Error() }
func (e fatal) Unwrap() error { return e.err }

// Silent rewords a read that timed out after d, on a connection that had read bytes from the
// peer, as what the peer did: "the peer sent nothing for 30s", or "the peer sent 16 byte(s),
// then nothing for 30s". Other errors are returned as they are.
func Silent(err error, d time.Duration, read int) error {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	if read == 0 {
		return silence{fmt.Sprintf("the peer sent nothing for %v", Round(d)), err}
	}
	return silence{fmt.Sprintf("the peer sent %d byte(s), then nothing for %v", read, Round(d)), err}
}

type silence struct {
	msg string
	err error
}

func (e silence) Error() string { return e.msg }
func (e silence) Unwrap() error { return e.err }

// whyDropped says what a dropped connection did.
func whyDropped(c *Conn, err error, idle time.Duration) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout() && c.read == 0:
		return fmt.Sprintf("it sent nothing for %v", idle)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("it sent %d byte(s), then nothing for %v", c.read, idle)
	case (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && c.read == 0:
		return "it closed without sending anything"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("it sent %d byte(s) and closed", c.read)
	case errors.Is(err, syscall.ECONNRESET):
		return fmt.Sprintf("it reset the connection after %d byte(s)", c.read)
	}
	return err.Error()
}

// Stopped says why ctx ended, for a run that has been going on for d: "timed out after 5s" or
// "interrupted".
func Stopped(ctx context.Context, d time.Duration) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %v", Round(d))
	}
	return errors.New("interrupted")
}

// Round rounds a duration for people: to the second from a second on, to 10 ms from 10 ms on,
// and below that to the unit of its first digit, so that a short time that passed (a -timeout of
// 1ms) never reads as 0s.
func Round(d time.Duration) time.Duration {
	for _, unit := range []struct{ from, to time.Duration }{
		{time.Second, time.Second}, {10 * time.Millisecond, 10 * time.Millisecond},
		{time.Millisecond, time.Millisecond}, {time.Microsecond, time.Microsecond},
	} {
		if d >= unit.from {
			return d.Round(unit.to)
		}
	}
	return d
}

// ErrFlushed marks a failure whose only error completions were flushes: the QP went to the error
// state and no completion says why (the reason is in the device's events).
var ErrFlushed = errors.New("the QP went to the error state")

// FirstFailure picks the completion to report among wcs: the first error that is not a flush,
// else the first flush; ok is false when every completion succeeded.
func FirstFailure(wcs []engine.WC) (wc engine.WC, ok bool) {
	for _, w := range wcs {
		if w.Status != engine.WCSuccess && w.Status != engine.WCWRFlushErr {
			return w, true
		}
	}
	for _, w := range wcs {
		if w.Status != engine.WCSuccess {
			return w, true
		}
	}
	return engine.WC{}, false
}

// Why is what a failed completion says about itself, with a hint where the usual cause is a
// setting that differs between the two sides.
func Why(wc engine.WC) error {
	switch {
	case wc.Status == engine.WCWRFlushErr && wc.Err == nil:
		return fmt.Errorf("%w and no completion says why (did the peer send a packet longer than this side's path MTU? is -m the same on both sides?)", ErrFlushed)
	case wc.Status == engine.WCWRFlushErr && strings.Contains(wc.Err.Error(), "path MTU"):
		return fmt.Errorf("%w: %w (is -m the same on both sides?)", ErrFlushed, wc.Err)
	case wc.Status == engine.WCWRFlushErr:
		return fmt.Errorf("%w: %w", ErrFlushed, wc.Err)
	case wc.Status == engine.WCRemInvReqErr:
		return fmt.Errorf("%v (the peer refused a request: is its path MTU, -m, the same as this side's?)", wc.Err)
	case wc.Err == nil:
		return errors.New("no reason given")
	}
	return wc.Err
}

// RTRFailed words a failed move of a QP to RTR toward dgid: when nothing on the link answers for
// the peer's address, what to check; otherwise the device's reason.
func RTRFailed(err error, dgid netip.Addr) error {
	if errors.Is(err, syscall.EHOSTUNREACH) {
		return fmt.Errorf("failed to modify QP to RTR: nothing on the link answers for the peer's address %s "+
			"(is the link the one to the peer, and is that address the peer's -ip, or its own on an adapter?)", dgid)
	}
	return fmt.Errorf("failed to modify QP to RTR: %w", err)
}

// OrDefault is *p, or def when p is nil (an option left unset).
func OrDefault(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}
