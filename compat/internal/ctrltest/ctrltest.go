// Package ctrltest gives the tests of the compat packages the other end of a control connection
// when it is not a peer: a server that answers anything with a fixed text, and a dial that waits
// for a server to listen.
package ctrltest

import (
	"io"
	"net"
	"testing"
	"time"
)

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
