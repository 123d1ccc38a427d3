// Package control is a fabric's control socket (serve -control) and the protocol spoken on it:
// faults added, listed and removed, and the ports' counters read, while the fabric runs. The
// socket is a Unix stream socket of mode 0600 that answers processes of its owner's user only
// (their credentials are checked on each connection).
//
// A command is one line of at most MaxLine bytes; its answer ends with a line "ok ..." or
// "error WHY", after whatever lines it lists:
//
//	add FAULT   ok N (the fault's number), FAULT in wire/faultplan's syntax
//	list        a line a fault, "N fired=F seen=S frames=LIST SPEC", then ok
//	remove N    ok
//	ports       a line a port, "port NAME in_frames=... in_bytes=... out_frames=... out_bytes=... dropped=... queued=...", then ok
//
// frames= are the numbers of the first frames a fault fired on in the fabric's pcap, "..."
// after them when it fired on more, "none" before it fires. Server answers it; Client asks.
package control

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/softirdma/softirdma/fabric"
	"github.com/softirdma/softirdma/wire/faultplan"
	"golang.org/x/sys/unix"
)

// MaxLine bounds a command, and a line of an answer: a fault is one short line.
const MaxLine = 4096

// ErrInUse is Listen's error for a socket another process listens on.
var ErrInUse = errors.New("another process listens on it")

// Server answers commands on a control socket.
type Server struct {
	ln      *net.UnixListener
	path    string
	fab     *fabric.Fabric
	senders []string
	log     *slog.Logger
	owner   atomic.Int64 // the user whose processes may connect: this process's
}

// Listen makes a control socket at path for fab, replacing a socket file nobody listens on.
// senders are the names a fault's from= may take (fabric.CheckFault); log receives the
// refusals of peers of other users.
func Listen(path string, fab *fabric.Fabric, senders []string, log *slog.Logger) (*Server, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", path, ErrInUse)
		}
		_ = os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// Before the first accept; peers are checked by their credentials besides.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{ln: ln, path: path, fab: fab, senders: senders, log: log}
	s.owner.Store(int64(os.Geteuid()))
	return s, nil
}

// Serve answers connections, each on its own, until the server is closed.
func (s *Server) Serve() {
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		go s.handle(conn)
	}
}

// Close stops listening and removes the socket.
func (s *Server) Close() error {
	err := s.ln.Close()
	_ = os.Remove(s.path)
	return err
}

// peerUID is the user of the process at the other end of conn.
func peerUID(conn *net.UnixConn) (int, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

func (s *Server) handle(conn *net.UnixConn) {
	defer conn.Close()
	w := bufio.NewWriter(conn)
	defer w.Flush()
	uid, err := peerUID(conn)
	if owner := s.owner.Load(); err != nil || int64(uid) != owner {
		s.log.Warn("control: peer refused", "peer_uid", uid, "err", err)
		fmt.Fprintf(w, "error refused: the control socket is its owner's (uid %d), not uid %d's\n", owner, uid)
		return
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 256), MaxLine)
	for sc.Scan() {
		s.command(w, strings.TrimSpace(sc.Text()))
		if err := w.Flush(); err != nil {
			return
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		fmt.Fprintf(w, "error a command is one line of at most %d bytes\n", MaxLine)
	}
}

// command answers one line: "ok ..." or "error ...", after the lines list and ports print.
func (s *Server) command(w io.Writer, line string) {
	verb, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "add":
		s.add(w, rest)
	case "list", "ports":
		if rest != "" {
			fmt.Fprintf(w, "error %s takes nothing\n", verb)
			return
		}
		if verb == "list" {
			s.list(w)
		} else {
			s.ports(w)
		}
		fmt.Fprintln(w, "ok")
	case "remove":
		id, err := strconv.Atoi(rest)
		switch {
		case err != nil:
			fmt.Fprintf(w, "error remove takes a fault's number, not %q\n", rest)
		case !s.fab.RemoveFault(id):
			fmt.Fprintf(w, "error no fault %d\n", id)
		default:
			fmt.Fprintln(w, "ok")
		}
	default:
		fmt.Fprintf(w, "error unknown command %q: add FAULT, list, remove N, ports\n", verb)
	}
}

func (s *Server) add(w io.Writer, spec string) {
	f, err := faultplan.Parse(spec)
	if err == nil {
		err = fabric.CheckFault(f, s.senders)
	}
	if err != nil {
		fmt.Fprintf(w, "error %v\n", err)
		return
	}
	fmt.Fprintf(w, "ok %d\n", s.fab.AddFault(f))
}

func (s *Server) list(w io.Writer) {
	for _, e := range s.fab.Faults() {
		fmt.Fprintf(w, "%d fired=%d seen=%d frames=%s %s\n", e.ID, e.Fired, e.Seen, firedFrames(e), e.Spec)
	}
}

func (s *Server) ports(w io.Writer) {
	for _, p := range s.fab.Ports() {
		fmt.Fprintf(w, "port %s in_frames=%d in_bytes=%d out_frames=%d out_bytes=%d dropped=%d queued=%d\n",
			p.Name, p.InFrames, p.InBytes, p.OutFrames, p.OutBytes, p.Dropped, p.Queued)
	}
}

// firedFrames is the frames= field of a fault's list line: the capture's numbers of the frames
// it fired on, "..." after them when it fired on more than are kept, "none" before it fires.
func firedFrames(e faultplan.Entry) string {
	if len(e.Frames) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, n := range e.Frames {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(n, 10))
	}
	if e.Fired > len(e.Frames) {
		b.WriteString(",...")
	}
	return b.String()
}
