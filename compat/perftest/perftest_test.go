package perftest

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/internal/loophosts"
)

func TestRecordFormat(t *testing.T) {
	r := Record{OutReads: 0x80, QPN: 0x11, PSN: 0x6bc2a8, RKey: 0x1234, VAddr: 0x7f1234567000,
		GID: netip.MustParseAddr("::ffff:192.168.10.10").As16()}
	want := "0000:0080:000011:6bc2a8:00001234:00007f1234567000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:0a:0a:00000000:\x00"
	if got := string(r.Marshal()); got != want || len(got) != RecordLen {
		t.Fatalf("record %q (%d bytes)", got, len(got))
	}
	back, err := ParseRecord([]byte(want))
	if err != nil || back != r {
		t.Fatalf("parse %+v %v", back, err)
	}
	for _, bad := range []string{"", "0000:0080", strings.Replace(want, "0080", "zz80", 1), strings.Replace(want, ":0a:0a:", ":0a:1ff:", 1)} {
		if _, err := ParseRecord([]byte(bad)); err == nil {
			t.Fatalf("parsed %q", bad)
		}
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add(Record{QPN: 0x11}.Marshal())
	f.Add([]byte("ffff:ffff:ffffff:ffffff:ffffffff:ffffffffffffffff:ff:ff:ff:ff:ff:ff:ff:ff:ff:ff:ff:ff:ff:ff:ff:ff:ffffffff:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord(b)
		if err != nil {
			return
		}
		if again, err := ParseRecord(r.Marshal()); err != nil || again != r {
			t.Fatalf("round trip %+v -> %+v %v", r, again, err)
		}
	})
}

// TestVersionRules runs the control exchange against a peer speaking an older version: the
// sizes of the MTU and iterations fields follow the peer's version.
func TestVersionRules(t *testing.T) {
	for _, c := range []struct {
		peer            string
		sys, mtu, iters int
	}{{"6.24", 4, 2, 8}, {"5.70", 4, 2, 8}} {
		a, b := net.Pipe()
		srv := newConn(a, false)
		done := make(chan error, 1)
		go func() {
			_, err := srv.begin(Record{QPN: 1, GID: netip.MustParseAddr("::ffff:1.2.3.4").As16()}, 3)
			if err == nil {
				_, err = exchangeReport(srv, Report{}, c.peer)
			}
			done <- err
		}()
		// The "peer" is a client written by hand.
		ver := make([]byte, 16)
		copy(ver, c.peer)
		b.Write(ver)
		got := make([]byte, 16)
		readFull(t, b, got)
		if !strings.HasPrefix(string(got), Version) {
			t.Fatalf("version %q", got)
		}
		for range 2 { // page size, cache line
			b.Write([]byte{0, 0, 0x10, 0})
			readFull(t, b, make([]byte, c.sys))
		}
		b.Write([]byte{'5', 0})
		mtu := make([]byte, c.mtu)
		readFull(t, b, mtu)
		if mtu[0] != '3' {
			t.Fatalf("MTU %q", mtu)
		}
		b.Write(Record{QPN: 2, GID: netip.MustParseAddr("::ffff:1.2.3.5").As16()}.Marshal())
		readFull(t, b, make([]byte, RecordLen))
		for _, n := range []int{8, c.iters, 8, 8, 8} {
			b.Write(make([]byte, n))
			readFull(t, b, make([]byte, n))
		}
		if err := <-done; err != nil {
			t.Fatalf("peer %s: %v", c.peer, err)
		}
		b.Close()
	}
}

func readFull(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for n := 0; n < len(b); {
		m, err := c.Read(b[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
}

// TestTests runs each bandwidth test with softirdma on both ends over real sockets, with the
// TCP exchange and with rdma_cm's (-R).
func TestTests(t *testing.T) {
	for _, c := range []struct {
		test  Test
		size  int
		title string
		conn  emu.QPType
		cm    bool
	}{{Write, 4096, "RDMA_Write BW Test", emu.QPTypeRC, false}, {Read, 4096, "RDMA_Read BW Test", emu.QPTypeRC, false},
		{Atomic, 8, "Atomic FETCH_AND_ADD BW Test", emu.QPTypeRC, false}, {Send, 2048, "Send BW Test", emu.QPTypeRC, false},
		// UD with the size left to its default: the MTU both sides agree on (1024 here).
		{Send, 0, "Send BW Test", emu.QPTypeUD, false},
		{Write, 4096, "RDMA_Write BW Test", emu.QPTypeRC, true}, {Read, 4096, "RDMA_Read BW Test", emu.QPTypeRC, true},
		{Atomic, 8, "Atomic FETCH_AND_ADD BW Test", emu.QPTypeRC, true}, {Send, 2048, "Send BW Test", emu.QPTypeRC, true}} {
		name := c.title + "/" + c.conn.String()
		if c.cm {
			name += "/rdma_cm"
		}
		t.Run(name, func(t *testing.T) {
			hs, hc := loophosts.Pair(t, 0, 3)
			l, _ := net.Listen("tcp4", "127.0.0.1:0")
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			// perftest's ACK timeout (14: 67 ms, seven retries) gives up after half a second
			// without an answer, which a loaded machine's scheduler can exceed under the race
			// detector; nothing here is lost, so nothing waits for it: give it 1 s (18).
			qpTimeout := 18
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			host := "127.0.0.1"
			if c.cm { // rdma_cm connects to the server's RoCE address
				host = hs.Device().IP().String()
			}
			s, cl := ctrltest.Both(func(out io.Writer) (Result, error) {
				return Run(ctx, hs.Device(), Options{Test: c.test, Conn: c.conn, Server: true, Host: "127.0.0.1", Port: port, Size: c.size, Iters: 300, GID: hs.Device().IP(), QPTimeout: &qpTimeout, RDMACM: c.cm}, out)
			}, func(out io.Writer) (Result, error) {
				return Run(ctx, hc.Device(), Options{Test: c.test, Conn: c.conn, Host: host, Port: port, Size: c.size, Iters: 300, GID: hc.Device().IP(), Wait: 20 * time.Second, QPTimeout: &qpTimeout, RDMACM: c.cm}, out)
			})
			ctrltest.BothSucceeded(t, s, cl)
			sres, cres, sout, cout := s.Res, cl.Res, &s.Out, &cl.Out
			for _, out := range []string{sout.String(), cout.String()} {
				if !strings.Contains(out, c.title) || !strings.Contains(out, " #bytes     #iterations") || !strings.Contains(out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:0") {
					t.Fatalf("output:\n%s", out)
				}
			}
			size := uint64(c.size)
			if c.conn == emu.QPTypeUD {
				size = 1024
				for _, out := range []string{sout.String(), cout.String()} {
					if !strings.Contains(out, " Connection type : UD") {
						t.Fatalf("output:\n%s", out)
					}
				}
				if sres.QP.QKey != QKey || cres.QP.QKey != QKey {
					t.Fatalf("Q_Keys 0x%x 0x%x", sres.QP.QKey, cres.QP.QKey)
				}
			}
			if cres.Size != size || cres.Iters != 300 || cres.AvgMBs <= 0 || sres.Size != size || sres.Iters != 300 {
				t.Fatalf("client %+v server %+v", cres.Report, sres.Report)
			}
			if c.test != Send && sres.AvgMBs != cres.AvgMBs {
				t.Fatalf("the server printed %v, the client measured %v", sres.AvgMBs, cres.AvgMBs)
			}
		})
	}
}

// TestRateLimit: a client with a rate limit sends no faster than it says (message n leaves no
// earlier than n/rate seconds in), UD to a server that takes them all.
func TestRateLimit(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 5)
	l, _ := net.Listen("tcp4", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, c := ctrltest.Both(func(out io.Writer) (Result, error) {
		return Run(ctx, hs.Device(), Options{Test: Send, Conn: emu.QPTypeUD, Server: true, Host: "127.0.0.1", Port: port, Iters: 100, GID: hs.Device().IP()}, out)
	}, func(out io.Writer) (Result, error) {
		return Run(ctx, hc.Device(), Options{Test: Send, Conn: emu.QPTypeUD, Host: "127.0.0.1", Port: port, Iters: 100, RateLimit: 1000, GID: hc.Device().IP(), Wait: 20 * time.Second}, out)
	})
	ctrltest.BothSucceeded(t, s, c)
	cres := c.Res
	// 100 messages at 1000 a second: the last leaves 99 ms in.
	if cres.Elapsed < 99*time.Millisecond || cres.MsgRateMpps*1e6 > 1000*100/99.0 {
		t.Fatalf("100 messages in %v (%.0f a second) with a limit of 1000 a second", cres.Elapsed, cres.MsgRateMpps*1e6)
	}
}
