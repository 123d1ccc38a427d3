// Package fakesock is, for tests, a Unix socket that is not what its client expects: it reads
// what the client sends first, answers with fixed bytes (or nothing) and may hang up, so a
// client's errors for a socket of the wrong kind, one that stops answering and one that closes
// early can be shown.
package fakesock

import (
	"io"
	"net"
	"testing"
)

// Listen listens on path until the test ends. Each connection gets answer once the client has
// sent something, then is closed if hangUp is set and otherwise held open until the test ends.
// It returns path.
func Listen(t testing.TB, path, answer string, hangUp bool) string {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go answerOnce(c, answer, hangUp)
		}
	}()
	return path
}

func answerOnce(c net.Conn, answer string, hangUp bool) {
	if _, err := c.Read(make([]byte, 64)); err != nil {
		return
	}
	if answer != "" {
		_, _ = io.WriteString(c, answer)
	}
	if hangUp {
		c.Close()
	}
}
