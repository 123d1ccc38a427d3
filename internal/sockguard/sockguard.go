// Package sockguard keeps a server's Unix stream connections ending cleanly when the server
// process dies.
//
// Linux resets a Unix stream connection whose end is closed with data still unread in it:
// the peer's next read fails with ECONNRESET instead of returning end of file. A server killed
// while its client is writing (SIGKILL, the OOM killer, a crash) always leaves such data behind,
// and some clients do not survive the reset: QEMU 11.1's vfio-user client aborts on an assertion
// (its receive path sets one error twice, in vfio_user_recv_hdr) and takes its guest with it.
//
// A Guard is a second process, started from the server's own executable, that holds a copy of
// each connection the server lends it. When the server goes, however it goes, the guard sees
// the pair of sockets between them close; it then shuts each connection down (the peer reads end
// of file and can send nothing more), reads and discards what is left in it (closing any
// descriptors that came with it), and closes it: nothing unread remains, so nothing is reset.
// While the server lives it ends its connections the same way itself (CloseConn) and then lets
// the guard's copy go.
//
// A binary that uses a Guard calls RunIfGuard first thing in main (and in TestMain), which turns
// the process into the guard when it was started as one.
package sockguard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// envFD names, in the guard's environment, the descriptor of its end of the pair.
const envFD = "SOFTIRDMA_SOCKGUARD_FD"

// Messages from the server to the guard: an op byte and a connection's id. opHold carries the
// connection's descriptor; the guard answers its start with opReady.
const (
	opHold    = 'H'
	opRelease = 'R'
	opReady   = 'K'
	msgLen    = 9
)

// Guard is the server's side of a running guard process.
type Guard struct {
	cmd  *exec.Cmd
	pair *os.File // SOCK_SEQPACKET; closing it tells the guard the server is gone

	mu     sync.Mutex
	next   uint64
	broken error // set once a message could not be sent: the guard is gone
}

// Start starts a guard process from the running executable and waits until it is ready.
// Its standard error is the server's, for the one line it prints when it cleans up.
func Start() (*Guard, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("sockguard: %w", err)
	}
	// Non-blocking, so that the runtime polls our end (deadlines work); the guard makes its
	// own end blocking.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("sockguard: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "sockguard"), os.NewFile(uintptr(fds[1]), "sockguard-peer")
	cmd := exec.Command(exe)
	cmd.Args = []string{"softirdma-sockguard"}
	cmd.Env = append(os.Environ(), envFD+"=3")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	// Its own process group: a terminal's ^C reaches the server, which then ends its
	// connections itself, and not the guard, which must outlive a server that dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	// Only the guard keeps its end: if it exits before it is ready, ours reads end of file.
	theirs.Close()
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("sockguard: start: %w", err)
	}
	g := &Guard{cmd: cmd, pair: ours}
	if err := g.awaitReady(10 * time.Second); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

func (g *Guard) awaitReady(timeout time.Duration) error {
	_ = g.pair.SetReadDeadline(time.Now().Add(timeout))
	var b [msgLen]byte
	n, err := g.pair.Read(b[:])
	_ = g.pair.SetReadDeadline(time.Time{})
	if err != nil || n < 1 || b[0] != opReady {
		return fmt.Errorf("sockguard: the guard process did not start (read %d bytes: %v)", n, err)
	}
	return nil
}

// Pid is the guard process's id.
func (g *Guard) Pid() int { return g.cmd.Process.Pid }

// Hold lends the guard a copy of conn until the returned release is called. Once the guard is
// gone Hold returns an error (the connection is served unguarded); release is then a no-op.
func (g *Guard) Hold(conn syscall.Conn) (release func(), err error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return func() {}, err
	}
	g.mu.Lock()
	g.next++
	id := g.next
	g.mu.Unlock()
	var sendErr error
	if err := rc.Control(func(fd uintptr) { sendErr = g.send(opHold, id, int(fd)) }); err != nil {
		return func() {}, err
	}
	if sendErr != nil {
		return func() {}, sendErr
	}
	var once sync.Once
	return func() { once.Do(func() { _ = g.send(opRelease, id, -1) }) }, nil
}

func (g *Guard) send(op byte, id uint64, fd int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.broken != nil {
		return g.broken
	}
	var msg [msgLen]byte
	msg[0] = op
	binary.LittleEndian.PutUint64(msg[1:], id)
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	rc, err := g.pair.SyscallConn()
	if err == nil {
		werr := rc.Write(func(pfd uintptr) bool {
			err = unix.Sendmsg(int(pfd), msg[:], oob, nil, unix.MSG_NOSIGNAL)
			return err != unix.EAGAIN
		})
		if werr != nil {
			err = werr
		}
	}
	if err != nil {
		g.broken = fmt.Errorf("sockguard: the guard process is gone: %w", err)
		return g.broken
	}
	return nil
}

// Close tells the guard the server is done and waits for it to exit. Connections still held
// are cleaned up by the guard as for a server that died.
func (g *Guard) Close() error {
	g.mu.Lock()
	g.broken = errors.New("sockguard: closed")
	g.mu.Unlock()
	g.pair.Close()
	return g.cmd.Wait()
}

// CloseConn ends a connection so that its peer reads end of file, never a reset: it shuts both
// directions down (the peer can send nothing more), reads and discards what was left unread
// (closing descriptors passed with it) and closes conn. It returns what it discarded. conn must
// not be in use by another goroutine.
func CloseConn(conn syscall.Conn) (bytes, fds int) {
	if rc, err := conn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { bytes, fds = shutdownDrain(int(fd)) })
	}
	if c, ok := conn.(interface{ Close() error }); ok {
		c.Close()
	}
	return bytes, fds
}

// Shutdown shuts both directions of conn down: a read blocked on it returns end of file, its
// peer reads end of file once it has read what was sent. Safe beside a goroutine using conn.
func Shutdown(conn syscall.Conn) {
	if rc, err := conn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
}

// shutdownDrain is CloseConn's work on a descriptor, short of the close.
func shutdownDrain(fd int) (bytes, fds int) {
	_ = unix.Shutdown(fd, unix.SHUT_RDWR)
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*253))
	for {
		// Once shut down, an empty connection reads end of file: this never waits.
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		if oobn > 0 {
			for _, f := range Rights(oob[:oobn]) {
				unix.Close(f)
				fds++
			}
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return bytes, fds
		}
		bytes += n
	}
}

// RunIfGuard turns the process into a guard when Start started it, and exits when the guard's
// work is done; otherwise it returns at once.
func RunIfGuard() {
	v, ok := os.LookupEnv(envFD)
	if !ok {
		return
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		fmt.Fprintf(os.Stderr, "softirdma-sockguard: bad %s=%q\n", envFD, v)
		os.Exit(2)
	}
	os.Exit(run(fd))
}

// run is the guard: it holds what the server lends until the server is gone, then ends it all.
func run(pair int) int {
	// The server's end of its life is the pair closing, not a signal: a signal sent to the
	// whole process group or to every softirdma process would otherwise end the guard first.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	// The pair was made non-blocking for the server's end; this end waits in recvmsg.
	if err := unix.SetNonblock(pair, false); err != nil {
		return 1
	}
	ready := [msgLen]byte{opReady}
	if err := unix.Sendmsg(pair, ready[:], nil, nil, unix.MSG_NOSIGNAL); err != nil {
		return 1
	}
	held := map[uint64]int{}
	msg := make([]byte, msgLen+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(pair, msg, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		var fds []int
		if oobn > 0 {
			fds = Rights(oob[:oobn])
		}
		if err != nil || n == 0 {
			CloseFDs(fds)
			break
		}
		if n == msgLen {
			id := binary.LittleEndian.Uint64(msg[1:])
			switch {
			case msg[0] == opHold && len(fds) == 1:
				if old, ok := held[id]; ok {
					unix.Close(old)
				}
				held[id], fds = fds[0], nil
			case msg[0] == opRelease:
				if fd, ok := held[id]; ok {
					unix.Close(fd)
					delete(held, id)
				}
			}
		}
		CloseFDs(fds) // what no message kept
	}
	if len(held) == 0 {
		return 0
	}
	var bytes, fds int
	for _, fd := range held {
		b, f := shutdownDrain(fd)
		unix.Close(fd)
		bytes, fds = bytes+b, fds+f
	}
	fmt.Fprintf(os.Stderr, "softirdma-sockguard: the server is gone; %d connection(s) shut down, %d unread bytes and %d descriptors discarded, closed\n",
		len(held), bytes, fds)
	return 0
}

// Rights returns the descriptors the SCM_RIGHTS messages in oob carry.
func Rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// CloseFDs closes each descriptor, as those Rights returned that nobody keeps.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
