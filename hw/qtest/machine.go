package qtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Config says which QEMU to start and how. Nothing is read from the environment.
type Config struct {
	// QEMU is the qemu-system-x86_64 to run (required).
	QEMU string
	// Dir holds the qtest and QMP sockets while QEMU connects to them (required). A unix socket
	// path is limited to 107 bytes, so keep it short.
	Dir string
	// Memory is the guest RAM in bytes, a shared memfd so that a vfio-user server can map it
	// (default 256 MiB; a multiple of 1 MiB). Up to 2 GiB, q35 places it all at guest physical
	// 0 up: RAM is [0, 0xA0000) and [0x100000, Memory); between them lie VGA and the BIOS ROM.
	Memory uint64
	// Devices are extra -device arguments, one per device, e.g. the JSON form
	// {"driver":"vfio-user-pci","socket":{"path":"/run/x.sock","type":"unix"}}.
	Devices []string
	// Args are further QEMU arguments, appended as they are.
	Args []string
	// Stderr, if set, receives a copy of QEMU's standard error as it is written.
	Stderr io.Writer
}

// stderrKeep is how much of QEMU's standard error a Machine keeps for error messages.
const stderrKeep = 64 << 10

// Machine is a running QEMU under qtest. Its embedded Client reaches the machine's memory, ports
// and clock. Close stops it.
type Machine struct {
	*Client

	cmd    *exec.Cmd
	qtest  net.Conn
	qmp    net.Conn
	qmpDec *json.Decoder
	qmpMu  sync.Mutex
	stderr *tailBuffer

	exited  chan struct{} // closed once the process has been reaped
	waitErr error         // the process's exit status, valid once exited is closed

	closeOnce sync.Once
}

// args returns QEMU's command line for cfg, with the sockets qtestPath and qmpPath, without the
// program name.
func (cfg *Config) args(qtestPath, qmpPath string) []string {
	mem := cfg.Memory
	if mem == 0 {
		mem = 256 << 20
	}
	a := []string{
		"-machine", "q35,accel=qtest,memory-backend=mem",
		"-m", strconv.FormatUint(mem>>20, 10) + "M",
		"-object", "memory-backend-memfd,id=mem,size=" + strconv.FormatUint(mem, 10) + ",share=on",
		"-qtest", "unix:" + qtestPath,
		"-qtest-log", "none",
		"-qmp", "unix:" + qmpPath,
		"-nographic", "-nodefaults", "-display", "none",
	}
	for _, d := range cfg.Devices {
		a = append(a, "-device", d)
	}
	return append(a, cfg.Args...)
}

// Start runs QEMU under qtest with cfg and returns once both its qtest and QMP connections are
// up and answering. QEMU connects to sockets Start listens on, so there is nothing to poll for.
// ctx bounds the start only. If QEMU exits instead, the error carries its standard error.
func Start(ctx context.Context, cfg Config) (*Machine, error) {
	qtestPath, qmpPath, err := cfg.sockets()
	if err != nil {
		return nil, err
	}
	qtestLn, err := listen(qtestPath)
	if err != nil {
		return nil, err
	}
	defer qtestLn.Close()
	qmpLn, err := listen(qmpPath)
	if err != nil {
		return nil, err
	}
	defer qmpLn.Close()
	m, err := cfg.launch(qtestPath, qmpPath)
	if err != nil {
		return nil, err
	}
	if err := m.accept(ctx, qtestLn, qmpLn); err != nil {
		m.Close()
		return nil, err
	}
	os.Remove(qtestPath)
	os.Remove(qmpPath)
	m.Client = NewClient(m.qtest)
	m.qmpDec = json.NewDecoder(m.qmp)

	if err := m.handshake(ctx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// sockets checks cfg and names the qtest and QMP sockets in its Dir.
func (cfg *Config) sockets() (qtestPath, qmpPath string, err error) {
	if cfg.QEMU == "" || cfg.Dir == "" {
		return "", "", errors.New("qtest: Config.QEMU and Config.Dir are required")
	}
	if cfg.Memory%(1<<20) != 0 {
		return "", "", fmt.Errorf("qtest: Config.Memory %d is not a multiple of 1 MiB", cfg.Memory)
	}
	qtestPath = filepath.Join(cfg.Dir, "qtest.sock")
	qmpPath = filepath.Join(cfg.Dir, "qmp.sock")
	if len(qmpPath) > 107 || len(qtestPath) > 107 {
		return "", "", fmt.Errorf("qtest: socket path %s is longer than a unix socket allows", qtestPath)
	}
	return qtestPath, qmpPath, nil
}

// launch starts QEMU, to connect to the sockets, and reaps it when it exits.
func (cfg *Config) launch(qtestPath, qmpPath string) (*Machine, error) {
	m := &Machine{stderr: &tailBuffer{max: stderrKeep, copy: cfg.Stderr}, exited: make(chan struct{})}
	m.cmd = exec.Command(cfg.QEMU, cfg.args(qtestPath, qmpPath)...)
	m.cmd.Stderr = m.stderr
	// A test binary that dies must not leave QEMU running.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("qtest: start %s: %w", cfg.QEMU, err)
	}
	go func() {
		m.waitErr = m.cmd.Wait()
		close(m.exited)
	}()
	return m, nil
}

// accepted is what an Accept returned.
type accepted struct {
	c   net.Conn
	err error
}

// acceptOnce accepts one connection on ln, on its own goroutine.
func acceptOnce(ln net.Listener) chan accepted {
	ch := make(chan accepted, 1)
	go func() { c, err := ln.Accept(); ch <- accepted{c, err} }()
	return ch
}

// accept waits for QEMU's qtest and QMP connections, until QEMU exits or ctx ends. On failure
// it closes the listeners and every connection that came.
func (m *Machine) accept(ctx context.Context, qtestLn, qmpLn net.Listener) error {
	qtestCh, qmpCh := acceptOnce(qtestLn), acceptOnce(qmpLn)
	var fail error
	for (m.qtest == nil || m.qmp == nil) && fail == nil {
		select {
		case a := <-qtestCh:
			m.qtest, qtestCh, fail = a.c, nil, a.err
		case a := <-qmpCh:
			m.qmp, qmpCh, fail = a.c, nil, a.err
		case <-m.exited:
			fail = m.exitError("before connecting")
		case <-ctx.Done():
			fail = fmt.Errorf("qtest: waiting for QEMU to connect: %w", ctx.Err())
		}
	}
	if fail != nil {
		// Closing the listeners ends the accepts still waiting.
		qtestLn.Close()
		qmpLn.Close()
		for _, ch := range []chan accepted{qtestCh, qmpCh} {
			if ch == nil {
				continue
			}
			if a := <-ch; a.c != nil {
				a.c.Close()
			}
		}
	}
	return fail
}

func listen(path string) (net.Listener, error) {
	os.Remove(path) // a stale socket from a killed run
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("qtest: %w", err)
	}
	return ln, nil
}

// handshake negotiates QMP and checks qtest answers. A QEMU that fails after connecting (a bad
// -device, say) closes both sockets: the error then waits for its exit and carries its stderr.
func (m *Machine) handshake(ctx context.Context) error {
	stop := deadlineFrom(ctx, m.qtest, m.qmp)
	defer stop()
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	if err := m.qmpDec.Decode(&greeting); err != nil || greeting.QMP == nil {
		return m.startError(ctx, "QMP greeting", err)
	}
	if _, err := m.qmpExecute("qmp_capabilities", nil); err != nil {
		return m.startError(ctx, "qmp_capabilities", err)
	}
	if err := m.Sync(); err != nil {
		return m.startError(ctx, "qtest", err)
	}
	return nil
}

// startError reports a failure during start. A connection QEMU closed (end of file or reset)
// means it is exiting: the error then waits for the exit, until ctx is done, to carry its stderr.
func (m *Machine) startError(ctx context.Context, what string, err error) error {
	if err == nil {
		err = errors.New("unexpected reply")
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		select {
		case <-m.exited:
		case <-ctx.Done():
		}
	}
	select {
	case <-m.exited:
		return m.exitError("during " + what)
	default:
	}
	return fmt.Errorf("qtest: %s: %w (stderr: %s)", what, err, m.Stderr())
}

func (m *Machine) exitError(when string) error {
	return fmt.Errorf("qtest: QEMU exited %s (%v): %s", when, m.waitErr, bytes.TrimSpace([]byte(m.Stderr())))
}

// deadlineFrom applies ctx's deadline and cancellation to conns until the returned stop is called.
func deadlineFrom(ctx context.Context, conns ...net.Conn) (stop func()) {
	if d, ok := ctx.Deadline(); ok {
		for _, c := range conns {
			c.SetDeadline(d)
		}
	}
	// A deadline in the past makes blocked reads return at once.
	cancel := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.SetDeadline(time.Unix(1, 0))
		}
	})
	return func() {
		cancel()
		for _, c := range conns {
			c.SetDeadline(time.Time{})
		}
	}
}

// QMPError is an error reply to a QMP command.
type QMPError struct {
	Command string
	Class   string
	Desc    string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qtest: QMP %s: %s: %s", e.Command, e.Class, e.Desc)
}

// QMP executes a QMP command with arguments args (nil for none) and returns its "return" value.
// Events that arrive meanwhile are skipped. ctx bounds the exchange.
func (m *Machine) QMP(ctx context.Context, command string, args any) (json.RawMessage, error) {
	m.qmpMu.Lock()
	defer m.qmpMu.Unlock()
	stop := deadlineFrom(ctx, m.qmp)
	defer stop()
	return m.qmpExecute(command, args)
}

func (m *Machine) qmpExecute(command string, args any) (json.RawMessage, error) {
	req := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
	}{command, args}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("qtest: QMP %s: %w", command, err)
	}
	if _, err := m.qmp.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qtest: QMP %s: %w", command, err)
	}
	for {
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := m.qmpDec.Decode(&resp); err != nil {
			return nil, fmt.Errorf("qtest: QMP %s: %w", command, err)
		}
		switch {
		case resp.Error != nil:
			return nil, &QMPError{Command: command, Class: resp.Error.Class, Desc: resp.Error.Desc}
		case resp.Return != nil:
			return resp.Return, nil
		case resp.Event != "":
			continue
		default:
			return nil, fmt.Errorf("%w: QMP %s: a reply with neither return nor error", ErrProtocol, command)
		}
	}
}

// Shutdown asks QEMU to quit through QMP and waits for it to exit, until ctx is done; then (or if
// the request fails) it kills it. Either way the Machine is closed when Shutdown returns.
func (m *Machine) Shutdown(ctx context.Context) error {
	_, qerr := m.QMP(ctx, "quit", nil)
	// QEMU may exit before its reply is read: the exit decides, not the reply.
	select {
	case <-m.exited:
		qerr = nil
		if m.waitErr != nil {
			qerr = fmt.Errorf("qtest: QEMU quit with %w: %s", m.waitErr, m.Stderr())
		}
	case <-ctx.Done():
		if qerr == nil {
			qerr = fmt.Errorf("qtest: QEMU did not quit: %w", ctx.Err())
		}
	}
	m.Close()
	return qerr
}

// Close kills QEMU if it still runs, reaps it and releases the connections. It is safe to call
// more than once and from another goroutine than one blocked in a command (which then fails).
func (m *Machine) Close() error {
	m.closeOnce.Do(func() {
		select {
		case <-m.exited:
		default:
			m.cmd.Process.Kill()
		}
		<-m.exited
		if m.qtest != nil {
			m.qtest.Close()
		}
		if m.qmp != nil {
			m.qmp.Close()
		}
	})
	return nil
}

// Exited is closed once QEMU has exited and been reaped.
func (m *Machine) Exited() <-chan struct{} { return m.exited }

// ExitErr is QEMU's exit status once Exited is closed (nil for exit status 0).
func (m *Machine) ExitErr() error {
	select {
	case <-m.exited:
		return m.waitErr
	default:
		return nil
	}
}

// Pid is QEMU's process id.
func (m *Machine) Pid() int { return m.cmd.Process.Pid }

// Stderr returns the last 64 KiB QEMU wrote to its standard error.
func (m *Machine) Stderr() string { return m.stderr.String() }

// tailBuffer keeps the last max bytes written to it and copies everything to copy.
type tailBuffer struct {
	mu   sync.Mutex
	buf  []byte
	max  int
	copy io.Writer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	if t.copy != nil {
		t.copy.Write(p) // a failing copy must not stop QEMU's stderr from draining
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
