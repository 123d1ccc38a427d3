// Package loophosts gives tests two softirdma hosts joined by real UDP sockets on loopback, the
// way QEMU's -netdev dgram joins a guest to softirdma: "server" at 192.0.2.1 and "client" at
// 192.0.2.2, each with an EUI-64 IPv6 link-local address and answering ARP and ND itself.
package loophosts

import (
	"io"
	mrand "math/rand/v2"
	"net/netip"
	"testing"

	"github.com/softirdma/softirdma/emu/realtime"

	"github.com/softirdma/softirdma/wire/neigh"
	"github.com/softirdma/softirdma/wire/qemu"
)

// Pair starts the two hosts; each drops the fraction loss of the RoCE frames it receives.
// They stop when the test ends.
func Pair(t testing.TB, loss float64, seed uint64) (server, client *realtime.Host) {
	t.Helper()
	return PairPcap(t, loss, seed, nil)
}

// PairPcap is Pair with the server's link written to pcap (nil: none).
func PairPcap(t testing.TB, loss float64, seed uint64, pcap io.Writer) (server, client *realtime.Host) {
	t.Helper()
	la, err := qemu.ListenDgram("127.0.0.1:0", "127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := qemu.ListenDgram("127.0.0.1:0", la.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := la.SetRemote(lb.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, l *qemu.Dgram, last byte) *realtime.Host {
		mac := [6]byte{2, 0, 0, 0, 0, last}
		cfg := realtime.HostConfig{Name: name, Link: l, MAC: mac, IP: netip.AddrFrom4([4]byte{192, 0, 2, last}),
			IPs: []netip.Addr{neigh.LinkLocal(mac)}, Answer: true, RxLoss: loss, Rand: mrand.NewPCG(uint64(last), seed)}
		if last == 1 && pcap != nil {
			cfg.Pcap = pcap
		}
		h, err := realtime.NewHost(cfg)
		if err != nil {
			t.Fatal(err)
		}
		go h.Run()
		t.Cleanup(func() { h.Close() })
		return h
	}
	return mk("server", la, 1), mk("client", lb, 2)
}
