package vfiouser

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listening starts srv on a socket of its own, serving until the test ends, and returns the
// socket's path and where ClientGone's reports arrive.
func listening(t *testing.T, cfg Config) (string, <-chan error) {
	t.Helper()
	gone := make(chan error, 16)
	cfg.SocketPath = filepath.Join(t.TempDir(), "vfio-user.sock")
	cfg.ClientGone = func(err error) { gone <- err }
	srv, err := New(cfg, newFakeDev(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return cfg.SocketPath, gone
}

func dialRaw(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// A generous bound on every wait below, so that a server that never answers fails the
	// test instead of hanging it.
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	return conn
}

// waitEOF reads from conn until the server closes it, returning what came before.
func waitEOF(t *testing.T, conn *net.UnixConn) []byte {
	t.Helper()
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("waiting for the server to drop the client: %v (read %q)", err, b)
	}
	return b
}

// A client that connects and says nothing (softirdma fault pointed at a function's socket, a
// probe) would keep the one client slot from QEMU: once HandshakeTimeout passes without a
// VERSION it is dropped, with the reason reported, and the client queued behind it (QEMU) is
// served.
func TestSilentClientLosesTheSlot(t *testing.T) {
	path, gone := listening(t, Config{HandshakeTimeout: 100 * time.Millisecond})
	silent := dialRaw(t, path)
	qemu := NewClient(dialRaw(t, path))
	if _, err := qemu.Version(); err != nil {
		t.Fatalf("the client behind a silent one: %v", err)
	}
	if b := waitEOF(t, silent); len(b) != 0 {
		t.Errorf("the silent client was sent %q", b)
	}
	err := <-gone
	if !errors.Is(err, ErrNoVersion) || !strings.Contains(err.Error(), "within 100ms") || !strings.Contains(err.Error(), "it sent nothing") {
		t.Errorf("silent client reported gone with %v", err)
	}
	if _, err := qemu.GetDeviceInfo(); err != nil {
		t.Errorf("the client served: %v", err)
	}
}

// A client that says something that is not vfio-user is dropped: at once, with an error reply,
// when its first message has a header to reply to; at HandshakeTimeout when it sent less than a
// header and waits (softirdma fault's "status\n"). Either way the next client is served.
func TestNonVfioUserClientDropped(t *testing.T) {
	for _, c := range []struct {
		name    string
		send    []byte
		timeout time.Duration
		errno   syscall.Errno // of the error reply; 0: none
		reason  string
	}{
		{"fault command", []byte("status\n"), 100 * time.Millisecond, 0, `it sent 7 bytes, "status\n"`},
		{"SSH banner", []byte("SSH-2.0-OpenSSH_9.2p1\r\n"), time.Hour, syscall.E2BIG, "over the limit"},
		// Read as a header, "P/1." is flags that ask for no reply: none is sent.
		{"HTTP request", []byte("GET / HTTP/1.1\r\nHost: softirdma\r\n\r\n"), time.Hour, 0, "over the limit"},
		{"short size", rawMsg(1, CmdVersion, 0, nil)[:4], 100 * time.Millisecond, 0, "it sent 4 bytes"},
		{"size below the header", func() []byte { b := rawMsg(1, CmdVersion, 0, nil); b[4] = 8; return b }(), time.Hour, syscall.EINVAL, "shorter than its header"},
		{"another command first", rawMsg(1, CmdDeviceGetInfo, 0, u32s(16, 0, 0, 0)), time.Hour, syscall.EINVAL, "DEVICE_GET_INFO before VERSION"},
		{"VERSION of invalid JSON", rawMsg(1, CmdVersion, 0, append(make([]byte, 4), "{\x00"...)), time.Hour, syscall.EINVAL, "not valid"},
		{"VERSION major 1", rawMsg(1, CmdVersion, 0, append([]byte{1, 0, 0, 0}, QEMUVersionJSON+"\x00"...)), time.Hour, syscall.ENOTSUP, "major 1"},
		{"VERSION asking for no reply", rawMsg(1, CmdVersion, FlagNoReply, append(make([]byte, 4), QEMUVersionJSON+"\x00"...)), time.Hour, 0, "no reply"},
		{"half a VERSION", rawMsg(1, CmdVersion, 0, append(make([]byte, 4), QEMUVersionJSON+"\x00"...))[:40], 100 * time.Millisecond, 0, "it sent 40 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, gone := listening(t, Config{HandshakeTimeout: c.timeout})
			stray := dialRaw(t, path)
			if _, err := stray.Write(c.send); err != nil {
				t.Fatal(err)
			}
			next := NewClient(dialRaw(t, path))
			if _, err := next.Version(); err != nil {
				t.Fatalf("the next client: %v", err)
			}
			got := waitEOF(t, stray)
			if c.errno == 0 {
				if len(got) != 0 {
					t.Errorf("sent %q, want nothing", got)
				}
			} else {
				h := parseHeader(append(got, make([]byte, HeaderSize)...))
				sent := parseHeader(c.send)
				want := Header{ID: sent.ID, Cmd: sent.Cmd, Size: HeaderSize, Flags: FlagReply | FlagError, Errno: uint32(c.errno)}
				if len(got) != HeaderSize || h != want {
					t.Errorf("sent %q (%+v), want the error reply %+v", got, h, want)
				}
			}
			if err := <-gone; !errors.Is(err, ErrNoVersion) || !strings.Contains(err.Error(), c.reason) {
				t.Errorf("reported gone with %v, want %q in it", err, c.reason)
			}
		})
	}
}

// The deadline is the VERSION exchange's alone: a client that has negotiated may stay idle
// (QEMU with a guest that does not touch the device) for as long as it likes.
func TestIdleClientKeepsTheSlot(t *testing.T) {
	const timeout = 50 * time.Millisecond
	path, gone := listening(t, Config{HandshakeTimeout: timeout})
	c := NewClient(dialRaw(t, path))
	if _, err := c.Version(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * timeout) // idle, well past the deadline the exchange had
	if _, err := c.GetDeviceInfo(); err != nil {
		t.Fatalf("an idle client after VERSION: %v", err)
	}
	select {
	case err := <-gone:
		t.Fatalf("the idle client was dropped: %v", err)
	default:
	}
	c.Close()
	if err := <-gone; err != nil {
		t.Errorf("a hang-up reported as %v", err)
	}
}

// HandshakeTimeout 0 is the default; a negative one is refused.
func TestHandshakeTimeoutConfig(t *testing.T) {
	srv, err := New(Config{}, newFakeDev(t))
	if err != nil || srv.handshakeTimeout != DefaultHandshakeTimeout {
		t.Errorf("default: %v, %v", srv.handshakeTimeout, err)
	}
	if _, err := New(Config{HandshakeTimeout: -time.Second}, newFakeDev(t)); err == nil || !strings.Contains(err.Error(), "HandshakeTimeout") {
		t.Errorf("negative HandshakeTimeout: %v", err)
	}
}
