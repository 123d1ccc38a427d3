// Package servetest runs `softirdma serve` as a process of its own for tests: started and
// waited for until it listens, then stopped by a signal and checked to have stopped cleanly.
package servetest

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/internal/lockedbuf"
)

// Process is a running serve.
type Process struct {
	t        testing.TB
	cmd      *exec.Cmd
	sock     string
	out, log lockedbuf.Buffer
	exited   chan struct{}
	err      error // cmd.Wait's, once exited is closed
	stopOnce sync.Once
}

// Start starts cmd, a serve listening on sock, with its stdout and stderr captured, and waits
// (30 s at most) until it prints that it listens; the test fails if it does not or exits
// first. When the test ends, serve is stopped with SIGTERM unless the test stopped it.
func Start(t testing.TB, cmd *exec.Cmd, sock string) *Process {
	t.Helper()
	p := &Process{t: t, cmd: cmd, sock: sock, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.Stop(syscall.SIGTERM) })
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.out.String(), "listening on") {
		select {
		case <-p.exited:
			p.stopOnce.Do(func() {}) // nothing left to stop
			t.Fatalf("serve exited: %v\n%s", p.err, p.log.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve is not listening:\n%s", p.log.String())
		}
	}
	return p
}

// Log is what serve has logged (its stderr) so far.
func (p *Process) Log() string { return p.log.String() }

// Stop sends serve sig and checks that it exits with status 0 within 30 s (or kills it) and
// removes its socket. Only the first call does anything.
func (p *Process) Stop(sig os.Signal) {
	p.stopOnce.Do(func() {
		t := p.t
		select {
		case <-p.exited:
			t.Errorf("serve had exited before it was stopped: %v\n%s", p.err, p.log.String())
			return
		default:
		}
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.exited:
			if p.err != nil {
				t.Errorf("serve exited on %v: %v\n%s", sig, p.err, p.log.String())
			}
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			t.Errorf("serve did not stop on %v:\n%s", sig, p.log.String())
		}
		if _, err := os.Lstat(p.sock); !os.IsNotExist(err) {
			t.Errorf("serve left its socket: %v", err)
		}
	})
}

// Pid is serve's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Kill ends serve with SIGKILL, as a crash would, and waits until it has exited and whatever
// else held its output (its socket guard) has let go, 30 s at most.
func (p *Process) Kill() {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			p.t.Errorf("serve's output still open 30 s after SIGKILL:\n%s", p.log.String())
		}
	})
}
