package perftest

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"
)

// peerBytes is a net.Conn whose peer sent data and then closed; what this side writes is lost.
type peerBytes struct {
	net.Conn
	r *bytes.Reader
}

func (p peerBytes) Read(b []byte) (int, error)       { return p.r.Read(b) }
func (p peerBytes) Write(b []byte) (int, error)      { return len(b), nil }
func (p peerBytes) SetDeadline(time.Time) error      { return nil }
func (p peerBytes) SetReadDeadline(time.Time) error  { return nil }
func (p peerBytes) SetWriteDeadline(time.Time) error { return nil }
func (p peerBytes) Close() error                     { return nil }

// exchangeFrom is what a peer of the given version sends through the whole exchange of a
// write test: version, system data, MTU, five QP records with the report between H4 and H5.
func exchangeFrom(version string, pageSize, cacheLine uint32, mtu byte, iters int) []byte {
	var b bytes.Buffer
	ver := make([]byte, 16)
	copy(ver, version)
	b.Write(ver)
	b.Write([]byte{byte(pageSize >> 24), byte(pageSize >> 16), byte(pageSize >> 8), byte(pageSize)})
	b.Write([]byte{byte(cacheLine >> 24), byte(cacheLine >> 16), byte(cacheLine >> 8), byte(cacheLine)})
	b.Write([]byte{mtu, 0})
	rec := Record{OutReads: 16, QPN: 0x11, PSN: 0x123456, RKey: 0x1d7, VAddr: 0x7f0000010000, GID: netip.MustParseAddr("::ffff:192.0.2.2").As16()}.Marshal()
	for range 4 {
		b.Write(rec)
	}
	b.Write([]byte{0, 0, 0, 0, 0, 1, 0, 0}) // size 65536
	b.Write(make([]byte, iters))
	b.Write(make([]byte, 24)) // peak, average, message rate
	b.Write(rec)
	return b.Bytes()
}

// FuzzExchange feeds arbitrary bytes to both roles of the control exchange as the peer's side of
// it: never a panic, and whatever the peer says, the sizes this side goes on with stay within
// what it can allocate (page size and cache line from 4096 and 64 up to 1 MiB, MTU 1..5).
func FuzzExchange(f *testing.F) {
	f.Add(exchangeFrom("6.06", 4096, 64, '3', 8))
	f.Add(exchangeFrom("6.24", 65536, 128, '5', 8))
	f.Add(exchangeFrom("5.70", 0xffffffff, 0x80000000, '9', 8))
	f.Add(exchangeFrom("NaN", 4096, 64, '3', 8))
	f.Add(exchangeFrom("1e308", 4096, 64, 0, 4))
	f.Add(exchangeFrom("6.06", 4096, 64, '3', 8)[:40])
	f.Add([]byte("0000:000011:6bc2a8:00000000000000000000ffffc0a80a0a\x00done\x00"))
	local := Record{QPN: 0x12, GID: netip.MustParseAddr("::ffff:192.0.2.1").As16()}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, client := range []bool{false, true} {
			c := newConn(peerBytes{r: bytes.NewReader(data)}, client)
			h, err := preamble(c, c.client, 3)
			if err != nil {
				continue
			}
			if h.cycleBuffer < 4096 || h.cycleBuffer > 1<<20 || h.cacheLine < 64 || h.cacheLine > 1<<20 || h.mtu < 1 || h.mtu > 3 {
				t.Fatalf("peer %q: page size %d, cache line %d, MTU %d", h.peerVersion, h.cycleBuffer, h.cacheLine, h.mtu)
			}
			if _, err := hello(c, local); err != nil {
				continue
			}
			for range 3 {
				if _, err := c.record(local); err != nil {
					break
				}
			}
			_, _ = exchangeReport(c, Report{Size: 8, Iters: 1000}, h.peerVersion)
			_, _ = c.record(local)
		}
	})
}
