package main

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softirdma/softirdma/host/daemon"
)

func init() {
	register("run", "run a libibverbs or librdmacm program on softirdma, unchanged: softirdma run -- CMD ARGS...", runRun)
	register("env", "print the exports that put programs of a shell or CI step on softirdma", runEnv)
	register("stop", "stop this user's softirdma of the host path (the one run starts)", runStop)
}

// preloadName is the preload library, found beside the softirdma executable.
const preloadName = "libsoftirdma-preload.so"

// runtimeDir is this user's folder for the host path's softirdma: $XDG_RUNTIME_DIR/softirdma,
// else /tmp/softirdma-UID; made 0700 and refused if another user owns it.
func runtimeDir() (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	dir := filepath.Join(base, "softirdma")
	if base == "" {
		dir = filepath.Join(os.TempDir(), "softirdma-"+strconv.Itoa(os.Getuid()))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", err
	}
	if int(st.Uid) != os.Getuid() || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o077 != 0 {
		return "", fmt.Errorf("%s is not a private folder of this user's (owner %d, mode %o)", dir, st.Uid, st.Mode&0o777)
	}
	return dir, nil
}

// hostPath is where the host path's softirdma serves and what a program needs to reach it.
type hostPath struct {
	dir, socket, sysfs, preload string
	memlock                     bool // hold programs to RLIMIT_MEMLOCK (run -memlock)
	kernel                      bool // the kernel's own devices beside softirdma's (run -kernel)
}

func findHostPath(socket string) (hostPath, error) {
	exe, err := os.Executable()
	if err != nil {
		return hostPath{}, err
	}
	pre := filepath.Join(filepath.Dir(exe), preloadName)
	if _, err := os.Stat(pre); err != nil {
		return hostPath{}, fmt.Errorf("the preload library is not beside %s (%s): build it with make build", exe, preloadName)
	}
	dir, socket, err := hostSocket(socket)
	if err != nil {
		return hostPath{}, err
	}
	return hostPath{dir: dir, socket: socket, sysfs: filepath.Join(dir, "sys"), preload: pre}, nil
}

// hostSocket is the softirdma a command names (-socket), or else $SOFTIRDMA_SOCKET's, or else
// this user's: its folder and its socket.
func hostSocket(socket string) (dir, sock string, err error) {
	if socket == "" {
		socket = os.Getenv("SOFTIRDMA_SOCKET")
	}
	if socket != "" {
		return filepath.Dir(socket), socket, nil
	}
	if dir, err = runtimeDir(); err != nil {
		return "", "", err
	}
	return dir, filepath.Join(dir, "sock"), nil
}

// reachable says whether a softirdma answers on the socket.
func reachable(socket string) bool {
	c, err := net.Dial("unixpacket", socket)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// buildIdentity names this build of softirdma: a hash of its executable. A run and the
// softirdma it joins must be one build (their protocol and behaviour are one).
func buildIdentity() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := os.Open(exe)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// status asks the softirdma on socket how many programs it has connected.
func status(socket string) (int, error) {
	n, err := statusOf(socket, daemon.StatusConnections)
	return int(n), err
}

// statusOf asks the softirdma on socket what of its status (daemon.Status*) says.
func statusOf(socket string, what uint32) (uint32, error) {
	c, err := net.Dial("unixpacket", socket)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.Write(daemon.Hello(daemon.KindStatus, what)); err != nil {
		return 0, err
	}
	v, err := daemon.ReadAnswer(c)
	if err != nil {
		return 0, err
	}
	// Until softirdma has closed its end: the next question does not count this connection.
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = c.Read(make([]byte, 1))
	return v, nil
}

func init() {
	register("status", "this user's softirdma of the host path: its pid, programs connected, heap and open files", runStatus)
}

// runStatus is `softirdma status`: one line, or "none running" (exit 1).
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", stderr)
	socket := fs.String("socket", "", "the softirdma to ask (default: $SOFTIRDMA_SOCKET, else this user's)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma status [-socket PATH]")
		fmt.Fprintln(stderr, "Prints: pid P programs N heap_kib H files F (the programs connected, the heap in use after")
		fmt.Fprintln(stderr, "a collection, the daemon's open file descriptors); exit 1 when none runs.")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	hp, err := findHostPath(*socket)
	if err != nil {
		fmt.Fprintf(stderr, "softirdma status: %v\n", err)
		return 1
	}
	if !reachable(hp.socket) {
		fmt.Fprintln(stdout, "softirdma status: none running")
		return 1
	}
	var v [3]uint32
	for i, what := range []uint32{daemon.StatusConnections, daemon.StatusHeapKiB, daemon.StatusFiles} {
		// Files last: the questions before have closed their connections by then.
		if v[i], err = statusOf(hp.socket, what); err != nil {
			fmt.Fprintf(stderr, "softirdma status: %v\n", err)
			return 1
		}
	}
	pid, _ := os.ReadFile(filepath.Join(hp.dir, "pid"))
	fmt.Fprintf(stdout, "pid %s programs %d heap_kib %d files %d\n", strings.TrimSpace(string(pid)), v[0], v[1], v[2])
	return 0
}

// sameBuild checks the softirdma that answers is this build. One of another build is replaced
// when it is idle; one that serves programs is left alone, and the run refused.
func sameBuild(hp hostPath) error {
	id := buildIdentity()
	have, _ := os.ReadFile(filepath.Join(hp.dir, "version"))
	if strings.TrimSpace(string(have)) == id {
		return nil
	}
	busy, err := status(hp.socket)
	if err != nil || busy > 0 {
		return fmt.Errorf("the softirdma at %s is another build and serves %d programs: run 'softirdma stop' when they are done", hp.socket, busy)
	}
	if err := stopDaemon(hp.dir); err != nil {
		return fmt.Errorf("replacing the softirdma of another build: %w", err)
	}
	return nil
}

// ensureDaemon starts this user's softirdma unless one of this build answers: one start at a
// time (a lock in its folder), in a session of its own, its output in DIR/log; it waits until
// the socket answers.
func ensureDaemon(hp hostPath, idle time.Duration) error {
	if reachable(hp.socket) {
		if err := sameBuild(hp); err != nil || reachable(hp.socket) {
			return err
		}
	}
	lock, err := os.OpenFile(filepath.Join(hp.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	if reachable(hp.socket) { // another run started it while this one waited
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(hp.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(exe, "hostd", "-dir", hp.dir, "-idle", idle.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if reachable(hp.socket) {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("softirdma hostd stopped at start (%v): see %s", err, filepath.Join(hp.dir, "log"))
		case <-time.After(delay):
		}
	}
}

// environ is the environment of a program on softirdma: base without what softirdma sets,
// then its exports.
func (hp hostPath) environ(base []string) []string {
	out := make([]string, 0, len(base)+6)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "LD_PRELOAD", "SOFTIRDMA_SOCKET", "SOFTIRDMA_SYSFS", "ASAN_OPTIONS", "SOFTIRDMA_KERNEL":
			continue
		}
		out = append(out, kv)
	}
	return append(out, hp.exports(base)...)
}

// exports are the variables softirdma sets for a program whose environment is base: the
// preload library first in LD_PRELOAD, softirdma's socket and sysfs tree, ASan told the
// library is not its own, and what run's flags ask for.
func (hp hostPath) exports(base []string) []string {
	set := map[string]string{}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set[k] = v
		}
	}
	pre := hp.preload
	if old := set["LD_PRELOAD"]; old != "" && !strings.Contains(old, preloadName) {
		pre += ":" + old
	}
	asan := "verify_asan_link_order=0"
	if old := set["ASAN_OPTIONS"]; old != "" {
		asan = old + ":" + asan
	}
	sys := hp.sysfs
	if hp.kernel {
		sys = filepath.Join(hp.dir, "sys-kernel")
	}
	out := []string{"LD_PRELOAD=" + pre, "SOFTIRDMA_SOCKET=" + hp.socket, "SOFTIRDMA_SYSFS=" + sys, "ASAN_OPTIONS=" + asan}
	if hp.kernel {
		out = append(out, "SOFTIRDMA_KERNEL=1")
	}
	if hp.memlock {
		out = append(out, "SOFTIRDMA_MEMLOCK=1")
	}
	return out
}

// preloadWarning says why a program cannot take the preload library, if it cannot: a static
// or setuid executable never sees it, and would only report "No IB devices found".
func preloadWarning(path string) string {
	st, err := os.Stat(path)
	if err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		return path + " is setuid or setgid: the dynamic loader ignores LD_PRELOAD for it, so it will not see softirdma"
	}
	f, err := elf.Open(path)
	if err != nil {
		return "" // a script, say: what it runs is checked by nobody
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return ""
		}
	}
	return path + " is statically linked: it cannot take the preload library, so it will not see softirdma"
}

func runRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", stderr)
	socket := fs.String("socket", "", "join the softirdma on this socket (default: $SOFTIRDMA_SOCKET, else this user's, started on first use)")
	idle := fs.Duration("idle", 10*time.Minute, "a softirdma this run starts stops after this long with no program")
	pcap := fs.String("pcap", "", "write every frame of softirdma's devices while CMD runs to FILE, a pcap (traffic between two programs on one device included)")
	kernel := fs.Bool("kernel", false, "show CMD the kernel's own RDMA devices beside softirdma's (on a host that has some); without it softirdma's list replaces the kernel's")
	memlock := fs.Bool("memlock", false, "hold CMD's memory registrations to its RLIMIT_MEMLOCK as the kernel does: past it ibv_reg_mr fails with ENOMEM (SOFTIRDMA_MEMLOCK=1)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma run [flags] -- CMD ARGS...")
		fmt.Fprintln(stderr, "Runs CMD with libibverbs and librdmacm on softirdma: no RDMA module, no root, no VM.")
		fmt.Fprintln(stderr, "Starts this user's softirdma on first use; it stops after -idle with no program.")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if *idle <= 0 {
		fmt.Fprintln(stderr, "softirdma run: -idle must be positive")
		return 2
	}
	hp, err := findHostPath(*socket)
	hp.memlock, hp.kernel = *memlock, *kernel
	if err == nil {
		err = ensureDaemon(hp, *idle)
	}
	var stop func() error
	if err == nil && *pcap != "" {
		stop, err = startCapture(hp.socket, *pcap)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softirdma run: %v\n", err)
		return 1
	}
	code := runProgram(hp, fs.Args(), stderr)
	if stop != nil {
		if err := stop(); err != nil {
			fmt.Fprintf(stderr, "softirdma run: capture %s: %v\n", *pcap, err)
			return max(code, 1)
		}
	}
	return code
}

// startCapture asks softirdma for a pcap of its devices' frames in path; stop ends it once
// the file holds every frame of the run.
func startCapture(socket, path string) (stop func() error, err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // softirdma has its own copy
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	if _, _, err = c.WriteMsgUnix(daemon.Hello(daemon.KindCapture, 0), unix.UnixRights(int(f.Fd())), nil); err == nil {
		var refused syscall.Errno
		if _, err = daemon.ReadAnswer(c); errors.Is(err, syscall.ENODEV) {
			err = errors.New("this softirdma is a serve, whose -pcap captures everything of its fabric: run without -pcap")
		} else if errors.As(err, &refused) {
			err = fmt.Errorf("softirdma refused the capture: %w", err)
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return func() error {
		defer c.Close()
		if err := c.CloseWrite(); err != nil {
			return err
		}
		var b [1]byte
		for { // softirdma closes once the file is whole
			if _, err := c.Read(b[:]); err != nil {
				return nil
			}
		}
	}, nil
}

// runProgram runs the program and returns its exit status (128+N for a signal N, as a shell).
func runProgram(hp hostPath, argv []string, stderr io.Writer) int {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "softirdma run: %v\n", err)
		return 127
	}
	if w := preloadWarning(path); w != "" {
		fmt.Fprintf(stderr, "softirdma run: warning: %s\n", w)
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = hp.environ(os.Environ())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "softirdma run: %v\n", err)
		return 126
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(stderr, "softirdma run: %v\n", err)
		return 1
	}
	return 0
}

func runEnv(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("env", stderr)
	socket := fs.String("socket", "", "the softirdma to use (default: this user's, started if need be)")
	kernel := fs.Bool("kernel", false, "the kernel's own RDMA devices beside softirdma's, as run -kernel")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma env [-socket PATH] [-kernel]")
		fmt.Fprintln(stderr, "Prints the exports that put the programs of a shell on softirdma: eval \"$(softirdma env)\".")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	hp, err := findHostPath(*socket)
	hp.kernel = *kernel
	if err == nil {
		err = ensureDaemon(hp, 10*time.Minute)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softirdma env: %v\n", err)
		return 1
	}
	for _, kv := range hp.exports(os.Environ()) {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(stdout, "export %s=%s\n", k, shellQuote(v))
	}
	return 0
}

func runStop(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("stop", stderr)
	socket := fs.String("socket", "", "the softirdma to stop (default: $SOFTIRDMA_SOCKET, else this user's)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma stop [-socket PATH]")
		fmt.Fprintln(stderr, "Stops this user's softirdma of the host path, which 'softirdma run' started (or a serve -host")
		fmt.Fprintln(stderr, "serving in that folder).")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	dir, _, err := hostSocket(*socket)
	if err == nil {
		if !reachable(filepath.Join(dir, "sock")) {
			fmt.Fprintln(stdout, "softirdma stop: none running")
			return 0
		}
		err = stopDaemon(dir)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softirdma stop: %v\n", err)
		return 1
	}
	return 0
}

// stopDaemon stops the softirdma serving in dir and waits until its socket is gone.
func stopDaemon(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil || pid <= 0 {
		return fmt.Errorf("no pid in %s", filepath.Join(dir, "pid"))
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	for range 500 {
		if !reachable(filepath.Join(dir, "sock")) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("pid %d still serving", pid)
}
