// Package ctrltest gives the tests of the compat packages the other end of a control connection
// when it is not a peer: a server that answers anything with a fixed text, and a dial that waits
// for a server to listen; and when it is, both sides run at once. It also holds what the tools'
// tests check alike: options refused at once, a client facing a server that is not its peer,
// and a server dropping stray connections, each with the line it logs.
package ctrltest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Outcome is what one side's run returned and printed.
type Outcome[R any] struct {
	Res R
	Err error
	Out bytes.Buffer
}

// Both runs a server and a client at once, each printing to its own Outcome's Out, and returns
// once both have returned.
func Both[R any](server, client func(out io.Writer) (R, error)) (s, c *Outcome[R]) {
	s, c = new(Outcome[R]), new(Outcome[R])
	var wg sync.WaitGroup
	wg.Go(func() { s.Res, s.Err = server(&s.Out) })
	wg.Go(func() { c.Res, c.Err = client(&c.Out) })
	wg.Wait()
	return s, c
}

// BothSucceeded fails the test, with what both sides said, unless both runs succeeded.
func BothSucceeded[R any](t testing.TB, s, c *Outcome[R]) {
	t.Helper()
	if s.Err != nil || c.Err != nil {
		t.Fatalf("server: %v\n%s\nclient: %v\n%s", s.Err, s.Out.String(), c.Err, c.Out.String())
	}
}

// Text is err's text, "" for none: what a table of expected errors compares.
func Text(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Answering listens on loopback for one connection, writes answer to it (nothing when answer is
// empty), then reads until the client closes. It returns the port; the listener closes when the
// test ends.
func Answering(t testing.TB, answer []byte) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(answer)
		io.Copy(io.Discard, c)
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// DialUp connects to addr once something listens there, trying for up to 10 s.
func DialUp(t testing.TB, addr string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreePort is a loopback TCP port nothing listens on (it did a moment ago).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// RefusedAtOnce runs a tool with each of opts and checks that every run fails within a second,
// before it allocates anything, with an error that starts with prefix.
func RefusedAtOnce[O any](t testing.TB, prefix string, opts []O, run func(O) error) {
	t.Helper()
	for _, o := range opts {
		start := time.Now()
		if err := run(o); err == nil || !strings.HasPrefix(err.Error(), prefix) || time.Since(start) > time.Second {
			t.Fatalf("%+v: %v", o, err)
		}
	}
}

// BadServers gives a client, for each answer, a server that accepts and answers it (Answering),
// and checks that the client's run, given the server's port, fails with the error want.
func BadServers(t testing.TB, answers map[string]string, run func(port int) error) {
	t.Helper()
	for answer, want := range answers {
		if err := run(Answering(t, []byte(answer))); err == nil || err.Error() != want {
			t.Errorf("answer %q: got %v, want %s", answer, err, want)
		}
	}
}

// Lines collects what a run logs, one Write a line.
type Lines chan string

func (l Lines) Write(p []byte) (int, error) { l <- string(p); return len(p), nil }

// Next is the next line logged; the test ends if none comes within 10 s.
func (l Lines) Next(t testing.TB) string {
	t.Helper()
	select {
	case s := <-l:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no line logged")
		return ""
	}
}

// Stray is a server run in the background for the connections it drops: where it listens, and
// what it logs and prints.
type Stray struct {
	Addr string
	Port int
	Log  Lines
	Out  bytes.Buffer
	done chan error
}

// ServeStrays runs serve (a server on port, logging to log, printing to out) in the background.
func ServeStrays(t testing.TB, serve func(port int, log, out io.Writer) error) *Stray {
	t.Helper()
	s := &Stray{Port: FreePort(t), Log: make(Lines, 16), done: make(chan error, 1)}
	s.Addr = fmt.Sprintf("127.0.0.1:%d", s.Port)
	go func() { s.done <- serve(s.Port, s.Log, &s.Out) }()
	return s
}

// Dropped waits for the server's next line and checks that it dropped a connection for why.
func (s *Stray) Dropped(t testing.TB, why string) {
	t.Helper()
	got := s.Log.Next(t)
	if !strings.HasPrefix(got, "dropped a connection from 127.0.0.1:") || !strings.HasSuffix(got, ": "+why+"; still waiting for a client\n") {
		t.Fatalf("logged %q, want the reason %q", got, why)
	}
}

// Served checks, once a real client ran (its error cerr, its output cout), that both it and the
// server ended well.
func (s *Stray) Served(t testing.TB, cerr error, cout string) {
	t.Helper()
	if cerr != nil {
		t.Fatalf("client: %v\n%s", cerr, cout)
	}
	if err := <-s.done; err != nil {
		t.Fatalf("server: %v\n%s", err, s.Out.String())
	}
}
