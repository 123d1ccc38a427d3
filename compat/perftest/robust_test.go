package perftest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/internal/loophosts"
)

type outcome struct {
	res Result
	err error
	out bytes.Buffer
}

// pair runs a server and a client of one test on two loopback hosts; the client waits for the
// server to listen.
func pair(t *testing.T, so, co Options) (s, c *outcome) {
	t.Helper()
	hs, hc := loophosts.Pair(t, 0, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	so.Server, so.Host, so.GID, so.Port = true, "127.0.0.1", hs.Device().IP(), ctrltest.FreePort(t)
	if co.Test == 0 { // the server's test unless the client is given another
		co.Test = so.Test
	}
	co.Host, co.Port, co.GID, co.Wait = "127.0.0.1", so.Port, hc.Device().IP(), 20*time.Second
	s, c = new(outcome), new(outcome)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.res, s.err = Run(ctx, hs.Device(), so, &s.out) }()
	go func() { defer wg.Done(); c.res, c.err = Run(ctx, hc.Device(), co, &c.out) }()
	wg.Wait()
	return s, c
}

// TestSendIterationsMismatch: ib_send_bw's two sides do not exchange -n; a client that sends
// fewer or more messages than the server expects ends both sides with an error that says so,
// instead of leaving them waiting.
func TestSendIterationsMismatch(t *testing.T) {
	for _, c := range []struct {
		server, client int
		want           string
	}{
		{100, 40, "perftest: the client finished after sending 40 of the 100 messages this side expects: give both sides the same -n"},
		{40, 100, "perftest: the client sent more than the 40 messages this side expects: give both sides the same -n"},
	} {
		t.Run(fmt.Sprintf("server%d_client%d", c.server, c.client), func(t *testing.T) {
			start := time.Now()
			s, cl := pair(t, Options{Test: Send, Size: 1024, Iters: c.server, Timeout: 20 * time.Second}, Options{Size: 1024, Iters: c.client, Timeout: 20 * time.Second})
			if s.err == nil || s.err.Error() != c.want {
				t.Fatalf("server: %v, want %s", s.err, c.want)
			}
			if cl.err == nil || !strings.HasSuffix(cl.err.Error(), "(see its output; ib_send_bw's sides exchange neither -n nor -s)") {
				t.Fatalf("client: %v, want an error that points at the server's output", cl.err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("took %v", d)
			}
			t.Logf("client: %v", cl.err)
		})
	}
}

// TestRefusedRequestHints: a request the server refuses is explained by what the exchange tells
// (the path MTU is negotiated, so never -m): a WRITE, READ or atomic the server's QP does not
// grant means it runs another test; a SEND longer than its receives, a difference of -s. A
// shorter SEND ends the server with an error rather than a result line that measures nothing.
func TestRefusedRequestHints(t *testing.T) {
	const other = "its QP or buffer does not grant it, so it runs another test; run the same test on both sides))"
	const ended = "(see its output; ib_send_bw's sides exchange neither -n nor -s)"
	for _, c := range []struct {
		name                   string
		server, client         Options
		serverWant, clientWant string
		clientOr               string // when the server's end reaches the client before the NAK
	}{
		{"read_vs_write_server", Options{Test: Write}, Options{Test: Read}, "", "(the peer refused the RDMA READ: " + other, ""},
		{"atomic_vs_read_server", Options{Test: Read}, Options{Test: Atomic}, "", "(the peer refused the atomic: " + other, ""},
		{"write_vs_send_server", Options{Test: Send, Size: 1024}, Options{Test: Write, Size: 1024}, "", "(the peer refused the RDMA WRITE: " + other, ""},
		{"send_longer", Options{Test: Send, Size: 1024}, Options{Size: 4096},
			"(LOC_LEN_ERR: SEND of at least 2048 bytes into a receive of 1024)",
			"(the peer refused the SEND: its receives are shorter than this side's 4096-byte messages; give both sides the same -s))", ended},
		{"send_shorter", Options{Test: Send, Size: 4096}, Options{Size: 1024},
			"perftest: the client sends 1024-byte messages, this side expects -s 4096: give both sides the same -s",
			ended, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.server.Iters, c.client.Iters = 50, 50
			c.server.Timeout, c.client.Timeout = 10*time.Second, 10*time.Second
			s, cl := pair(t, c.server, c.client)
			if cl.err == nil || !strings.HasSuffix(cl.err.Error(), c.clientWant) && (c.clientOr == "" || !strings.HasSuffix(cl.err.Error(), c.clientOr)) || strings.Contains(cl.err.Error(), "-m") {
				t.Errorf("client: %v\nwant it to end with %q", cl.err, c.clientWant)
			}
			if c.serverWant != "" && (s.err == nil || !strings.HasSuffix(s.err.Error(), c.serverWant)) {
				t.Errorf("server: %v\nwant it to end with %q", s.err, c.serverWant)
			}
			if strings.Contains(s.out.String(), " 4096       50 ") {
				t.Errorf("the server printed a result:\n%s", s.out.String())
			}
		})
	}
}

// TestServerDropsStrayConnections: connections that close, stay silent, speak another version,
// or get through the version exchange and then send no QP record, something else, or a GID of
// the other type, are dropped with one line each, and the server goes on to serve a real client.
func TestServerDropsStrayConnections(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := ctrltest.ServeStrays(t, func(port int, log, out io.Writer) error {
		_, err := Run(ctx, hs.Device(), Options{Test: Write, Server: true, Host: "127.0.0.1", Port: port, Iters: 20, GID: hs.Device().IP(),
			Idle: 300 * time.Millisecond, Log: log}, out)
		return err
	})
	ctrltest.DialUp(t, srv.Addr).Close()
	srv.Dropped(t, "it closed without sending anything")
	const preamble = "6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" + "\x00\x00\x10\x00" + "\x00\x00\x00\x40" + "3\x00"
	for _, stray := range []struct{ send, why string }{
		{"", "it sent nothing for 300ms"},
		{"6.06", "it sent 4 byte(s), then nothing for 300ms"},
		{"SSH-2.0-OpenSSH_9.2\r\n", `perftest: the peer sent "SSH-2.0-OpenSSH_", not a perftest version`},
		{"5.0\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", `perftest: peer version "5.0" is older than 5.70`},
		{preamble, "it sent 26 byte(s), then nothing for 300ms"},
		{preamble + strings.Repeat("x", RecordLen), `perftest: couldn't parse line "` + strings.Repeat("x", RecordLen) + `"`},
		{preamble + string(Record{QPN: 2, GID: netip.MustParseAddr("fe80::1").As16()}.Marshal()),
			"perftest: found incompatibility issue with GID types (the peer's GID is fe80::1, this side's ::ffff:192.0.2.1: choose GIDs of one type with -x)"},
	} {
		c, err := net.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(stray.send))
		srv.Dropped(t, stray.why)
		c.Close()
	}
	var cout bytes.Buffer
	_, err := Run(ctx, hc.Device(), Options{Test: Write, Host: "127.0.0.1", Port: srv.Port, Iters: 20, GID: hc.Device().IP()}, &cout)
	srv.Served(t, err, cout.String())
}

// TestClientUnreachable: a client with nobody to talk to says so at once.
func TestClientUnreachable(t *testing.T) {
	_, hc := loophosts.Pair(t, 0, 1)
	port := ctrltest.FreePort(t)
	start := time.Now()
	_, err := Run(context.Background(), hc.Device(), Options{Test: Write, Host: "127.0.0.1", Port: port, GID: hc.Device().IP()}, &bytes.Buffer{})
	if want := fmt.Sprintf("perftest: couldn't connect to 127.0.0.1:%d: connection refused", port); err == nil || err.Error() != want || time.Since(start) > 5*time.Second {
		t.Fatalf("got %v after %v, want %s", err, time.Since(start), want)
	}
}

// TestQPAttributes: -u and the retry count reach the client's QP (the only one at RTS).
func TestQPAttributes(t *testing.T) {
	timeout, retry := 20, 2
	s, c := pair(t, Options{Test: Write, Iters: 10}, Options{Iters: 10, QPTimeout: &timeout, RetryCount: &retry})
	if s.err != nil || c.err != nil {
		t.Fatalf("server %v, client %v", s.err, c.err)
	}
	if c.res.QP.Timeout != 20 || c.res.QP.RetryCnt != 2 || c.res.QP.RNRRetry != 7 {
		t.Fatalf("client QP %+v", c.res.QP)
	}
}

// TestRecordPeerReset: a peer that resets the connection instead of sending its QP record is
// reported as one that closed it, not as a socket error.
func TestRecordPeerReset(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.ReadFull(c, make([]byte, RecordLen)) // the record, then a reset instead of an answer
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}()
	nc, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, err = newConn(nc, true).record(Record{QPN: 1})
	if want := "perftest: the peer closed the connection instead of sending its QP record (see its output)"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %s", err, want)
	}
}
