package pingpong

import (
	"context"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

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
