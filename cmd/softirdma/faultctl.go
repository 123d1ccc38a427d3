package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
	"golang.org/x/sys/unix"
)

func init() {
	register("fault", "break serve's fabric on demand: add, list and remove faults through its control socket", runFault)
}

// maxControlLine bounds a control command: a fault is one short line.
const maxControlLine = 4096

// faultFlags collects serve's -fault flags, each parsed as it is given.
type faultFlags []faultplan.Fault

func (f *faultFlags) String() string { return fmt.Sprint(len(*f), " faults") }

func (f *faultFlags) Set(v string) error {
	ft, err := faultplan.Parse(v)
	if err != nil {
		return err
	}
	*f = append(*f, ft)
	return nil
}

// checkFaultNames refuses a fault naming a sender the fabric does not have: a typo would
// otherwise match nothing, silently.
func checkFaultNames(f faultplan.Fault, names []string) error {
	if f.Src != "" && !slices.Contains(names, f.Src) {
		return fmt.Errorf("from=%s: the fabric has %s", f.Src, strings.Join(names, ", "))
	}
	return nil
}

// controlServer answers fault commands, and what the fabric's ports carried, on a Unix socket,
// mode 0600, from processes of serve's own user only (their credentials are checked on each
// connection).
type controlServer struct {
	ln    *net.UnixListener
	path  string
	plan  *faultplan.Live
	sw    *ethswitch.Switch
	names []string
	log   *slog.Logger
	owner atomic.Int64 // the user whose processes may connect: serve's
}

// listenControl makes the control socket at path (checked with the flags, checkSocketPath),
// replacing a socket file nobody listens on.
func listenControl(path string, plan *faultplan.Live, sw *ethswitch.Switch, names []string, log *slog.Logger) (*controlServer, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("-control %s: another process listens on it", path)
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
	c := &controlServer{ln: ln, path: path, plan: plan, sw: sw, names: names, log: log}
	c.owner.Store(int64(os.Geteuid()))
	return c, nil
}

// serve accepts connections until the listener closes.
func (c *controlServer) serve() {
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			return
		}
		go c.handle(conn)
	}
}

func (c *controlServer) close() {
	c.ln.Close()
	_ = os.Remove(c.path)
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

func (c *controlServer) handle(conn *net.UnixConn) {
	defer conn.Close()
	w := bufio.NewWriter(conn)
	defer w.Flush()
	uid, err := peerUID(conn)
	if owner := c.owner.Load(); err != nil || int64(uid) != owner {
		c.log.Warn("control: peer refused", "peer_uid", uid, "err", err)
		fmt.Fprintf(w, "error refused: the control socket is its owner's (uid %d), not uid %d's\n", owner, uid)
		return
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 256), maxControlLine)
	for sc.Scan() {
		c.command(w, strings.TrimSpace(sc.Text()))
		if err := w.Flush(); err != nil {
			return
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		fmt.Fprintf(w, "error a command is one line of at most %d bytes\n", maxControlLine)
	}
}

// command answers one line: "ok ..." or "error ...", after the lines list prints.
func (c *controlServer) command(w io.Writer, line string) {
	verb, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "add":
		f, err := faultplan.Parse(rest)
		if err == nil {
			err = checkFaultNames(f, c.names)
		}
		if err != nil {
			fmt.Fprintf(w, "error %v\n", err)
			return
		}
		id := c.plan.Add(f)
		c.log.Info("fault added", "id", id, "fault", f.Spec())
		fmt.Fprintf(w, "ok %d\n", id)
	case "list":
		if rest != "" {
			fmt.Fprintln(w, "error list takes nothing")
			return
		}
		for _, e := range c.plan.List() {
			fmt.Fprintf(w, "%d fired=%d seen=%d frames=%s %s\n", e.ID, e.Fired, e.Seen, firedFrames(e), e.Spec)
		}
		fmt.Fprintln(w, "ok")
	case "ports":
		if rest != "" {
			fmt.Fprintln(w, "error ports takes nothing")
			return
		}
		for _, p := range c.sw.Ports() {
			n := p.Counters()
			fmt.Fprintf(w, "port %s in_frames=%d in_bytes=%d out_frames=%d out_bytes=%d dropped=%d queued=%d\n",
				p.Name(), n.InFrames, n.InBytes, n.OutFrames, n.OutBytes, n.Dropped, n.Queued)
		}
		fmt.Fprintln(w, "ok")
	case "remove":
		id, err := strconv.Atoi(rest)
		switch {
		case err != nil:
			fmt.Fprintf(w, "error remove takes a fault's number, not %q\n", rest)
		case !c.plan.Remove(id):
			fmt.Fprintf(w, "error no fault %d\n", id)
		default:
			c.log.Info("fault removed", "id", id)
			fmt.Fprintln(w, "ok")
		}
	default:
		fmt.Fprintf(w, "error unknown command %q: add FAULT, list, remove N, ports\n", verb)
	}
}

// runFault is `softirdma fault -socket CTL add FAULT...|list|remove N|ports`.
func runFault(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("fault", stderr)
	socket := fs.String("socket", "", "serve's control socket (serve -control PATH)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on serve's answer after this long (1ms..10m)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma fault -socket CTL add FAULT | list | remove N | ports")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Breaks the fabric of a `softirdma serve -function ... -control CTL` while it runs: add a fault")
		fmt.Fprintln(stderr, "(its number printed), list the faults with how often each matched and fired and the numbers of")
		fmt.Fprintln(stderr, "the frames it fired on in serve's -pcap capture, remove one;")
		fmt.Fprintln(stderr, "ports shows what each port of the fabric carried, as the switch saw it: frames and bytes in")
		fmt.Fprintln(stderr, "from the function (or the uplink's link) and out to it, frames dropped for it (its queue full:")
		fmt.Fprintln(stderr, "a guest that does not keep up), frames queued.")
		fmt.Fprintln(stderr, "A fault:")
		fmt.Fprintln(stderr, "  "+strings.ReplaceAll(faultplan.Syntax, "\n", "\n  "))
		fmt.Fprintln(stderr, "e.g. softirdma fault -socket /tmp/ctl.sock add drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if exit, done := parseFlags(fs, args); done {
		return exit
	}
	if code := checkFlags(stderr, "fault", durationRange("timeout", *timeout, time.Millisecond, 10*time.Minute)); code != 0 {
		return code
	}
	if *socket == "" {
		fmt.Fprintln(stderr, "softirdma fault: -socket CTL is required: serve's -control socket")
		return 2
	}
	var line string
	switch cmd := fs.Args(); {
	case len(cmd) >= 2 && cmd[0] == "add":
		if _, err := faultplan.Parse(strings.Join(cmd[1:], " ")); err != nil {
			fmt.Fprintf(stderr, "softirdma fault: %v\n", err)
			return 2
		}
		line = "add " + strings.Join(cmd[1:], " ")
	case len(cmd) == 1 && (cmd[0] == "list" || cmd[0] == "ports"):
		line = cmd[0]
	case len(cmd) == 2 && cmd[0] == "remove":
		if n, err := strconv.Atoi(cmd[1]); err != nil || n < 1 {
			fmt.Fprintf(stderr, "softirdma fault: remove takes a fault's number, not %q\n", cmd[1])
			return 2
		}
		line = "remove " + cmd[1]
	default:
		fmt.Fprintln(stderr, "softirdma fault: give add FAULT, list, remove N or ports")
		return 2
	}
	conn, err := net.DialTimeout("unix", *socket, *timeout)
	if err != nil {
		fmt.Fprintf(stderr, "softirdma fault: %v\n", err)
		return 1
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(*timeout))
	if _, err := fmt.Fprintln(conn, line); err != nil {
		fmt.Fprintf(stderr, "softirdma fault: %v\n", err)
		return 1
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "ok":
			return 0
		case strings.HasPrefix(l, "ok "):
			fmt.Fprintf(stdout, "fault %s added\n", strings.TrimPrefix(l, "ok "))
			return 0
		case strings.HasPrefix(l, "error "):
			fmt.Fprintf(stderr, "softirdma fault: %s\n", strings.TrimPrefix(l, "error "))
			return 1
		default:
			fmt.Fprintln(stdout, l)
		}
	}
	fmt.Fprintf(stderr, "softirdma fault: serve ended the connection without an answer (%v)\n", sc.Err())
	return 1
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
