package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
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

// runFault is `softirdma fault -socket CTL add FAULT...|list|remove N|ports`, its flags before,
// after or among the words of its command.
func runFault(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("fault", stderr)
	socket := fs.String("socket", "", "serve's control socket (serve -control `PATH`)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on serve's answer after this long (1ms..10m)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma fault -socket CTL add FAULT | list | remove N | ports")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Breaks the fabric of a `softirdma serve -function ... -control CTL` while it runs: add a fault")
		fmt.Fprintln(stderr, "(its number printed), list the faults with how often each matched and fired and the numbers of")
		fmt.Fprintln(stderr, "the frames it fired on in serve's -pcap capture, remove one;")
		fmt.Fprintln(stderr, "ports shows what each port of the fabric carried, as the switch saw it: frames and bytes in")
		fmt.Fprintln(stderr, "from the function (or the uplink's link) and out to it, frames dropped for it (its queue full:")
		fmt.Fprintln(stderr, "a guest that does not keep up), frames queued. The flags may come before or after the command.")
		fmt.Fprintln(stderr, "A fault:")
		fmt.Fprintln(stderr, "  "+strings.ReplaceAll(faultplan.Syntax, "\n", "\n  "))
		fmt.Fprintln(stderr, "e.g. softirdma fault -socket /tmp/ctl.sock add drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	cmd, code, done := parseWithArgs(fs, args)
	if done {
		return code
	}
	if code := checkFlags(stderr, "fault", durationRange("timeout", *timeout, time.Millisecond, 10*time.Minute)); code != 0 {
		return code
	}
	if *socket == "" {
		fmt.Fprintln(stderr, "softirdma fault: -socket CTL is required: serve's -control socket")
		return 2
	}
	var line string
	switch {
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
	if err := checkControlPath(*socket); err != nil {
		fmt.Fprintf(stderr, "softirdma fault: %v\n", err)
		return 2
	}
	answer, err := askControl(*socket, line, *timeout, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "softirdma fault: %v\n", err)
		return 1
	}
	switch {
	case strings.HasPrefix(answer, "error "):
		fmt.Fprintf(stderr, "softirdma fault: %s\n", strings.TrimPrefix(answer, "error "))
		return 1
	case cmd[0] == "add":
		fmt.Fprintf(stdout, "fault %s added\n", strings.TrimPrefix(answer, "ok "))
	case cmd[0] == "remove":
		fmt.Fprintf(stdout, "fault %s removed\n", cmd[1])
	}
	return 0
}

// checkControlPath refuses a -socket that is no socket at all, naming what it is; connect alone
// says "connection refused" of a file or a directory.
func checkControlPath(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil // dialing says why, in words of its own (askControl)
	}
	var what string
	switch m := fi.Mode(); {
	case m&os.ModeSocket != 0:
		return nil
	case m.IsDir():
		what = "a directory"
	case m.IsRegular():
		what = "a regular file"
	case m&os.ModeNamedPipe != 0:
		what = "a named pipe"
	case m&os.ModeDevice != 0:
		what = "a device"
	default:
		what = "not a socket"
	}
	return fmt.Errorf("-socket %s is %s, not serve's control socket (serve -control PATH)", path, what)
}

// firstAnswer bounds the wait for the first line of serve's answer, which its control socket
// writes at once: a server of another kind (a function's vfio-user socket, which waits for QEMU
// to speak first) is told apart in this long, not in -timeout's.
const firstAnswer = 2 * time.Second

// controlAnswer is a line serve's control socket answers with: ok (a fault's number after
// add), error and why, or a listing's line (a fault's, which starts with its number, or a
// port's).
var controlAnswer = regexp.MustCompile(`^(ok|ok [0-9]+|error .+|[0-9]+ .+|port .+)$`)

// askControl sends line to serve's control socket and copies the listing that answers it to
// stdout; it returns the answer's last line, "ok..." or "error ...". A socket that is not serve's
// control socket is an error that says so.
func askControl(path, line string, timeout time.Duration, stdout io.Writer) (string, error) {
	conn, err := net.DialTimeout("unix", path, timeout)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("-socket %s does not exist: is serve running with -control %s?", path, path)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "", fmt.Errorf("-socket %s is a socket nobody listens on: has serve stopped?", path)
	case errors.Is(err, syscall.EPROTOTYPE):
		return "", fmt.Errorf("%s is not a softirdma control socket (a datagram socket)", path)
	case err != nil:
		return "", fmt.Errorf("-socket %s: %v", path, err)
	}
	defer conn.Close()
	start := time.Now()
	_ = conn.SetDeadline(start.Add(min(firstAnswer, timeout)))
	if _, err := fmt.Fprintln(conn, line); err != nil {
		return "", fmt.Errorf("-socket %s: %v", path, err)
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 256), maxControlLine)
	read := 0
	for ; sc.Scan(); read++ {
		l := sc.Text()
		if read == 0 {
			if !controlAnswer.MatchString(l) {
				return "", fmt.Errorf("%s is not a softirdma control socket (it answered %q)", path, clip(l, 60))
			}
			_ = conn.SetDeadline(start.Add(timeout)) // serve answers; the rest of a listing may take longer
		}
		if l == "ok" || strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "error ") {
			return l, nil
		}
		fmt.Fprintln(stdout, l)
	}
	var ne net.Error
	timedOut := errors.As(sc.Err(), &ne) && ne.Timeout()
	switch {
	case read == 0 && timedOut:
		return "", fmt.Errorf("%s is not a softirdma control socket (it answered nothing within %v: a function's vfio-user socket?)", path, min(firstAnswer, timeout))
	case read == 0 && errors.Is(sc.Err(), bufio.ErrTooLong):
		return "", fmt.Errorf("%s is not a softirdma control socket (it answered a line longer than %d bytes)", path, maxControlLine)
	case read == 0:
		return "", fmt.Errorf("%s is not a softirdma control socket (it closed the connection without answering)", path)
	case timedOut:
		return "", fmt.Errorf("serve's answer did not end within %v", timeout)
	}
	return "", fmt.Errorf("serve ended the connection before its answer did (%v)", sc.Err())
}

// clip is s cut to at most n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
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
