package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/internal/ctrl"
	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/internal/loophosts"
	"github.com/softirdma/softirdma/wire/neigh"
)

func TestMessageFormat(t *testing.T) {
	d := Dest{QPN: 0x11, PSN: 0x6bc2a8, GID: netip.MustParseAddr("::ffff:192.168.10.10").As16()}
	want := "0000:000011:6bc2a8:00000000000000000000ffffc0a80a0a\x00"
	if got := string(d.Marshal()); got != want || len(got) != MessageLen {
		t.Fatalf("message %q (%d bytes)", got, len(got))
	}
	back, err := ParseDest([]byte(want))
	if err != nil || back != d {
		t.Fatalf("parse: %+v %v", back, err)
	}
	if GIDString(d.GID) != "::ffff:192.168.10.10" || GIDString([16]byte{}) != "::" {
		t.Fatal("GID printing")
	}
	for _, bad := range []string{"", "0000:000011:6bc2a8", "0000:zz0011:6bc2a8:00000000000000000000ffffc0a80a0a",
		"0000:1000000:6bc2a8:00000000000000000000ffffc0a80a0a", "0000:000011:6bc2a8:00000000000000000000ffffc0a80a0"} {
		if _, err := ParseDest([]byte(bad)); err == nil {
			t.Fatalf("parsed %q", bad)
		}
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:000011:6bc2a8:00000000000000000000ffffc0a80a0a\x00"))
	f.Add([]byte("ffff:ffffff:ffffff:ffffffffffffffffffffffffffffffff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDest(b)
		if err != nil {
			return
		}
		again, err := ParseDest(d.Marshal())
		if err != nil || again != d {
			t.Fatalf("round trip %+v -> %+v %v", d, again, err)
		}
	})
}

// TestPingPong runs softirdma's pingpong against itself: server and client on two hosts over
// real sockets, IPv4-mapped and IPv6 link-local GIDs, 64 B and multi-packet 4 KiB messages,
// with 2% of received frames lost (RC alone recovers from that), and the UC and UD tools' runs.
func TestPingPong(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  emu.QPType
		v6   bool
		size int
		loss float64
	}{
		{"ipv4_64B", emu.QPTypeRC, false, 64, 0},
		{"ipv4_4KiB", emu.QPTypeRC, false, 4096, 0},
		{"ipv6_linklocal_4KiB", emu.QPTypeRC, true, 4096, 0},
		{"ipv4_4KiB_loss", emu.QPTypeRC, false, 4096, 0.02},
		{"uc_ipv4_4KiB", emu.QPTypeUC, false, 4096, 0},
		{"ud_ipv4_1KiB", emu.QPTypeUD, false, 1024, 0},
		{"ud_ipv6_linklocal_4KiB", emu.QPTypeUD, true, 4096, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			hs, hc := loophosts.Pair(t, c.loss, 7)
			gid := func(h *emu.Host) netip.Addr {
				if c.v6 {
					return neigh.LinkLocal(h.Device().MAC())
				}
				return h.Device().IP()
			}
			// The tool's ACK timeout (14: 67 ms, seven retries) gives up after half a second
			// without an answer, which a loaded machine's scheduler can exceed; without loss
			// nothing waits for it, so give it 1 s (18) there, and 268 ms (16) with loss.
			qpTimeout := 18
			if c.loss > 0 {
				qpTimeout = 16
			}
			port := ctrltest.FreePort(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, cl := ctrltest.Both(func(out io.Writer) (Result, error) {
				return Run(ctx, hs.Device(), Options{Type: c.typ, Server: true, Host: "127.0.0.1", Port: port, Size: c.size, Iters: 200, GID: gid(hs), Validate: true, QPTimeout: &qpTimeout}, out)
			}, func(out io.Writer) (Result, error) {
				return Run(ctx, hc.Device(), Options{Type: c.typ, Host: "127.0.0.1", Port: port, Size: c.size, Iters: 200, GID: gid(hc), Validate: true, Wait: 20 * time.Second, QPTimeout: &qpTimeout}, out)
			})
			ctrltest.BothSucceeded(t, s, cl)
			sres, cres, sout, cout := s.Res, cl.Res, &s.Out, &cl.Out
			want := strconv.Itoa(c.size*200*2) + " bytes in "
			for _, out := range []string{sout.String(), cout.String()} {
				if !strings.Contains(out, "  local address:  LID 0x0000, QPN 0x") || !strings.Contains(out, "remote address: LID 0x0000") ||
					!strings.Contains(out, want) || !strings.Contains(out, "200 iters in ") {
					t.Fatalf("output:\n%s", out)
				}
			}
			if !strings.Contains(sout.String(), "GID "+gid(hc).String()) && !strings.Contains(sout.String(), "GID ::ffff:"+gid(hc).String()) {
				t.Fatalf("server output does not show the client's GID:\n%s", sout.String())
			}
			if sres.PageErrors != 0 || cres.Iters != 200 {
				t.Fatalf("page errors %d, iters %d", sres.PageErrors, cres.Iters)
			}
			// ibv_ud_pingpong prints "PSN 0x...: GID" in its local line; the others a comma.
			sep := map[emu.QPType]string{emu.QPTypeRC: ", GID", emu.QPTypeUC: ", GID", emu.QPTypeUD: ": GID"}[c.typ]
			if first := strings.SplitN(cout.String(), "\n", 2)[0]; !strings.Contains(first, sep) {
				t.Fatalf("local line %q lacks %q", first, sep)
			}
			if c.typ == emu.QPTypeUD && (sres.QP.QKey != QKey || cres.QP.QKey != QKey) {
				t.Fatalf("Q_Keys 0x%x 0x%x", sres.QP.QKey, cres.QP.QKey)
			}
		})
	}
}

// pair runs a server and a client on two loopback hosts; start is called with the server's
// options before it runs, and the client waits for the server to listen.
func pair(t *testing.T, so, co Options) (s, c *ctrltest.Outcome[Result]) {
	t.Helper()
	hs, hc := loophosts.Pair(t, 0, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	so.Server, so.Host, so.GID = true, "127.0.0.1", hs.Device().IP()
	co.Host, co.Port, co.GID, co.Wait = "127.0.0.1", so.Port, hc.Device().IP(), 20*time.Second
	return ctrltest.Both(func(out io.Writer) (Result, error) { return Run(ctx, hs.Device(), so, out) },
		func(out io.Writer) (Result, error) { return Run(ctx, hc.Device(), co, out) })
}

// TestServerDropsStrayConnections: connections that close, stay silent, send too little or
// something else, or an address without a GID, are dropped with one line each, and the server
// goes on to serve a real client.
func TestServerDropsStrayConnections(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := ctrltest.ServeStrays(t, func(port int, log, out io.Writer) error {
		_, err := Run(ctx, hs.Device(), Options{Server: true, Host: "127.0.0.1", Port: port, Iters: 20, GID: hs.Device().IP(),
			Idle: 300 * time.Millisecond, Log: log}, out)
		return err
	})
	c := ctrltest.DialUp(t, srv.Addr)
	c.Close()
	srv.Dropped(t, "it closed without sending anything")
	c = ctrltest.DialUp(t, srv.Addr)
	c.Write([]byte(strings.Repeat("GET / HTTP/1.1\r\n", 4)))
	srv.Dropped(t, `it sent "GET / HTTP/1.1\r\nGET / HTTP/1.1\r\nGET / HTTP/1.1\r\nGET ", not an ibv_rc_pingpong address`)
	c.Close()
	c = ctrltest.DialUp(t, srv.Addr)
	c.Write([]byte("0000:000011"))
	srv.Dropped(t, "it sent 11 byte(s), then nothing for 300ms")
	c.Close()
	c = ctrltest.DialUp(t, srv.Addr)
	srv.Dropped(t, "it sent nothing for 300ms")
	c.Close()
	c = ctrltest.DialUp(t, srv.Addr)
	c.Write(Dest{QPN: 0x11}.Marshal())
	srv.Dropped(t, "the peer sent no GID; on RoCE both sides need -g")
	c.Close()

	var cout bytes.Buffer
	_, err := Run(ctx, hc.Device(), Options{Host: "127.0.0.1", Port: srv.Port, Iters: 20, GID: hc.Device().IP()}, &cout)
	srv.Served(t, err, cout.String())
}

// TestServerTimeout: a server that nobody connects to says so when its time is up.
func TestServerTimeout(t *testing.T) {
	hs, _ := loophosts.Pair(t, 0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Run(ctx, hs.Device(), Options{Server: true, Host: "127.0.0.1", Port: ctrltest.FreePort(t), GID: hs.Device().IP()}, &bytes.Buffer{})
	if err == nil || !strings.HasPrefix(err.Error(), "pingpong: no client connected within ") || strings.Contains(err.Error(), "closed network connection") {
		t.Fatalf("got %v", err)
	}
}

// TestClientUnreachable: a client with nobody to talk to says so at once, as ibv_rc_pingpong
// does, instead of trying for the whole timeout.
func TestClientUnreachable(t *testing.T) {
	_, hc := loophosts.Pair(t, 0, 1)
	port := ctrltest.FreePort(t)
	for host, want := range map[string]string{
		"127.0.0.1":      fmt.Sprintf("pingpong: couldn't connect to 127.0.0.1:%d: connection refused", port),
		"nosuch.invalid": fmt.Sprintf("pingpong: couldn't connect to nosuch.invalid:%d: no such host", port),
	} {
		start := time.Now()
		_, err := Run(context.Background(), hc.Device(), Options{Host: host, Port: port, GID: hc.Device().IP()}, &bytes.Buffer{})
		if err == nil || err.Error() != want {
			t.Fatalf("%s: got %v, want %s", host, err, want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: took %v", host, d)
		}
	}
	// Nobody waits even with Wait for a name that does not resolve.
	start := time.Now()
	_, err := Run(context.Background(), hc.Device(), Options{Host: "nosuch.invalid", Port: port, Wait: time.Minute, GID: hc.Device().IP()}, &bytes.Buffer{})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("unresolvable host with Wait: %v after %v", err, time.Since(start))
	}
}

// TestClientWaits: with Wait a client says once that it waits, and gets through a connection
// closed before the server sent anything (QEMU's forward with nothing behind it) and refused
// connections until the server is up.
func TestClientWaits(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 11)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	log := make(ctrltest.Lines, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cerr := make(chan error, 1)
	var cout, sout bytes.Buffer
	go func() {
		_, err := Run(ctx, hc.Device(), Options{Host: "127.0.0.1", Port: port, Iters: 20, GID: hc.Device().IP(), Wait: 20 * time.Second, Log: log}, &cout)
		cerr <- err
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	l.Close()
	got := log.Next(t)
	want := fmt.Sprintf("waiting up to 20s for the server at 127.0.0.1:%d (", port)
	if !strings.HasPrefix(got, want) {
		t.Fatalf("logged %q, want %q...", got, want)
	}
	if _, err := Run(ctx, hs.Device(), Options{Server: true, Host: "127.0.0.1", Port: port, Iters: 20, GID: hs.Device().IP()}, &sout); err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	if err := <-cerr; err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	select {
	case more := <-log:
		t.Fatalf("logged more than once: %q", more)
	default:
	}
}

// TestQPAttributes: the QP timeout and retry count reach both QPs; by default they are the
// tool's 14 and 7.
func TestQPAttributes(t *testing.T) {
	timeout, retry := 18, 3
	s, c := pair(t, Options{Port: ctrltest.FreePort(t), Iters: 10, QPTimeout: &timeout, RetryCount: &retry}, Options{Iters: 10, QPTimeout: &timeout, RetryCount: &retry})
	if s.Err != nil || c.Err != nil {
		t.Fatalf("server %v, client %v", s.Err, c.Err)
	}
	for _, r := range []Result{s.Res, c.Res} {
		if r.QP.Timeout != 18 || r.QP.RetryCnt != 3 || r.QP.RNRRetry != 7 {
			t.Fatalf("QP timeout %d, retry count %d, rnr retry %d", r.QP.Timeout, r.QP.RetryCnt, r.QP.RNRRetry)
		}
	}
	s, c = pair(t, Options{Port: ctrltest.FreePort(t), Iters: 10}, Options{Iters: 10})
	if s.Err != nil || c.Err != nil || s.Res.QP.Timeout != 14 || s.Res.QP.RetryCnt != 7 || c.Res.QP.Timeout != 14 || c.Res.QP.RetryCnt != 7 {
		t.Fatalf("defaults: server %v %+v, client %v %+v", s.Err, s.Res.QP, c.Err, c.Res.QP)
	}
}

// TestMTUMismatch: the side that refuses a packet longer than its path MTU says its QP went to
// the error state and why (its flushed completion's reason), the other reports the NAK, both
// with a hint at -m.
func TestMTUMismatch(t *testing.T) {
	s, c := pair(t, Options{Port: ctrltest.FreePort(t), Iters: 10, MTU: 1024}, Options{Iters: 10, MTU: 4096})
	if !errors.Is(s.Err, ctrl.ErrFlushed) ||
		!strings.HasPrefix(s.Err.Error(), "pingpong: failed status WR_FLUSH_ERR (5) for wr_id 1: the QP went to the error state: flushed: QP 0x000011 went to ERR: responder refused psn ") ||
		!strings.HasSuffix(s.Err.Error(), " with NAK_INV_REQ: RC_SEND_ONLY with 4096 bytes, the path MTU is 1024 (is -m the same on both sides?)") {
		t.Fatalf("server: %v", s.Err)
	}
	if c.Err == nil || !strings.HasPrefix(c.Err.Error(), "pingpong: failed status REM_INV_REQ_ERR (9) for wr_id 2: the responder answered psn ") ||
		!strings.HasSuffix(c.Err.Error(), "with NAK_INV_REQ (the peer refused a request: is its path MTU, -m, the same as this side's?)") {
		t.Fatalf("client: %v", c.Err)
	}
}

// TestPeerNotOnLink: a client whose address nothing on the link answers for ends the server with
// a line that says so and what to check, not the device's "no link address".
func TestPeerNotOnLink(t *testing.T) {
	hs, _ := loophosts.Pair(t, 0, 1)
	port := ctrltest.FreePort(t)
	serr := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), hs.Device(), Options{Server: true, Host: "127.0.0.1", Port: port, GID: hs.Device().IP()}, &bytes.Buffer{})
		serr <- err
	}()
	c := ctrltest.DialUp(t, fmt.Sprintf("127.0.0.1:%d", port))
	defer c.Close()
	c.Write(Dest{QPN: 0x11, GID: netip.MustParseAddr("::ffff:192.0.2.99").As16()}.Marshal())
	want := "pingpong: failed to modify QP to RTR: nothing on the link answers for the peer's address 192.0.2.99 " +
		"(is the link the one to the peer, and is that address the peer's -ip, or its own on an adapter?)"
	if err := <-serr; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

// TestLastSendRunsBeforeTheLastSEND: Options.LastSend runs once on each side, when the last
// SEND is due and not yet sent: a client of one message calls it before its device sent a
// frame; a server, once the ping came and before its pong.
func TestLastSendRunsBeforeTheLastSEND(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 11)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var calls [2]int
	var seen [2]emu.Stats
	hook := func(i int, h *emu.Host) func() {
		return func() { calls[i]++; seen[i] = h.Device().Stats() }
	}
	port := ctrltest.FreePort(t)
	s, c := ctrltest.Both(func(out io.Writer) (Result, error) {
		return Run(ctx, hs.Device(), Options{Server: true, Host: "127.0.0.1", Port: port, Size: 64, Iters: 1, GID: hs.Device().IP(), LastSend: hook(0, hs)}, out)
	}, func(out io.Writer) (Result, error) {
		return Run(ctx, hc.Device(), Options{Host: "127.0.0.1", Port: port, Size: 64, Iters: 1, GID: hc.Device().IP(), Wait: 20 * time.Second, LastSend: hook(1, hc)}, out)
	})
	ctrltest.BothSucceeded(t, s, c)
	if calls != [2]int{1, 1} {
		t.Fatalf("LastSend ran %v times (server, client), want once each", calls)
	}
	if seen[1].TxFrames != 0 {
		t.Errorf("the client's LastSend ran after %d frames were sent, want before any", seen[1].TxFrames)
	}
	if seen[0].RxFrames == 0 || seen[0].TxFrames > 1 {
		t.Errorf("the server's LastSend ran with %d frames received and %d sent, want the ping in and at most its ACK out", seen[0].RxFrames, seen[0].TxFrames)
	}
}
