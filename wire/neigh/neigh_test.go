package neigh

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/softirdma/softirdma/wire/internal/pcaptest"
)

var (
	ourMAC  = [6]byte{0x02, 0, 0, 0, 0, 0x01}
	peerMAC = [6]byte{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	ourIP   = netip.MustParseAddr("192.168.77.1")
	peerIP  = netip.MustParseAddr("192.168.77.2")
	ourLL   = LinkLocal(ourMAC)
	peerLL  = LinkLocal(peerMAC)
)

func responder() *Responder {
	return &Responder{MAC: ourMAC, IPs: []netip.Addr{ourIP, ourLL}, Table: NewTable()}
}

func TestARPRequestAnswered(t *testing.T) {
	r := responder()
	req := AppendARP(nil, ARPRequest, Broadcast, peerMAC, peerIP, [6]byte{}, ourIP)
	reply, consumed := r.Handle(req, nil)
	if !consumed || len(reply) != 60 {
		t.Fatalf("consumed %v, reply %d bytes", consumed, len(reply))
	}
	// gopacket agrees on every field.
	p := gopacket.NewPacket(reply, layers.LayerTypeEthernet, gopacket.Default)
	arp, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP)
	if arp == nil || arp.Operation != ARPReply || !bytes.Equal(arp.SourceHwAddress, ourMAC[:]) ||
		!bytes.Equal(arp.SourceProtAddress, ourIP.AsSlice()) || !bytes.Equal(arp.DstHwAddress, peerMAC[:]) ||
		!bytes.Equal(arp.DstProtAddress, peerIP.AsSlice()) {
		t.Fatalf("reply %+v", arp)
	}
	if eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); !bytes.Equal(eth.DstMAC, peerMAC[:]) {
		t.Fatalf("reply to %v", eth.DstMAC)
	}
	if mac, ok := r.Table.Lookup(peerIP); !ok || mac != peerMAC {
		t.Fatal("the requester was not learned")
	}
	// A request for someone else is consumed and learned from, but not answered.
	other := AppendARP(nil, ARPRequest, Broadcast, peerMAC, peerIP, [6]byte{}, netip.MustParseAddr("192.168.77.9"))
	if reply, consumed := r.Handle(other, nil); !consumed || len(reply) != 0 {
		t.Fatal("answered for an address it does not own")
	}
	// An IPv4 UDP frame is not ours to take.
	if _, consumed := r.Handle(append(make([]byte, 12), 0x08, 0x00, 0x45), nil); consumed {
		t.Fatal("consumed an IPv4 frame")
	}
}

func TestNeighborSolicitationAnswered(t *testing.T) {
	r := responder()
	ns := AppendNS(nil, peerMAC, peerLL, ourLL)
	// The solicitation is to our solicited-node group, as Linux sends it.
	group, groupMAC := SolicitedNode(ourLL)
	if !bytes.Equal(ns[:6], groupMAC[:]) || group.String() != "ff02::1:ff00:1" {
		t.Fatalf("NS to %x / %s", ns[:6], group)
	}
	reply, consumed := r.Handle(ns, nil)
	if !consumed || len(reply) == 0 {
		t.Fatal("NS not answered")
	}
	m, err := Parse(reply)
	if err != nil || m.Op != TypeNeighborAdvertisement || m.TargetIP != ourLL || m.TargetMAC != ourMAC || m.SenderIP != ourLL {
		t.Fatalf("NA %+v %v", m, err)
	}
	// gopacket checks the ICMPv6 checksum.
	p := gopacket.NewPacket(reply, layers.LayerTypeEthernet, gopacket.Default)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	ip6 := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if icmp == nil || ip6.HopLimit != 255 || ip6.DstIP.String() != peerLL.String() {
		t.Fatalf("NA layers: %v", p)
	}
	if mac, ok := r.Table.Lookup(peerLL); !ok || mac != peerMAC {
		t.Fatal("the solicitor was not learned")
	}
	// A corrupted checksum is malformed: consumed, not answered, nothing learned.
	bad := append([]byte(nil), ns...)
	bad[len(bad)-1] ^= 1
	r2 := responder()
	if reply, consumed := r2.Handle(bad, nil); !consumed || len(reply) != 0 {
		t.Fatal("a bad NS was answered")
	}
	if _, ok := r2.Table.Lookup(peerLL); ok {
		t.Fatal("learned from a bad NS")
	}
}

func TestRequestAndWait(t *testing.T) {
	r := responder()
	req := r.Request(nil, peerIP)
	m, err := Parse(req)
	if err != nil || m.Op != ARPRequest || m.TargetIP != peerIP || m.SenderIP != ourIP {
		t.Fatalf("ARP request %+v %v", m, err)
	}
	ns := r.Request(nil, peerLL)
	if m, err := Parse(ns); err != nil || m.Op != TypeNeighborSolicitation || m.TargetIP != peerLL || m.SenderMAC != ourMAC {
		t.Fatalf("NS %+v %v", m, err)
	}
	asked := 0
	go func() {
		time.Sleep(20 * time.Millisecond)
		reply := AppendARP(nil, ARPReply, ourMAC, peerMAC, peerIP, ourMAC, ourIP)
		r.Handle(reply, nil)
	}()
	mac, ok := r.Table.Wait(peerIP, 2*time.Second, 5*time.Millisecond, func() { asked++ })
	if !ok || mac != peerMAC || asked < 2 {
		t.Fatalf("Wait: %v %x after %d requests", ok, mac, asked)
	}
	if _, ok := r.Table.Wait(netip.MustParseAddr("192.168.77.99"), 20*time.Millisecond, 5*time.Millisecond, func() {}); ok {
		t.Fatal("resolved an address nobody answered for")
	}
}

// TestCapturedNeighbors parses the ARP and ND frames Linux sent in the recorded captures
// (including duplicate address detection, sent from the unspecified address).
func TestCapturedNeighbors(t *testing.T) {
	arps, nds := 0, 0
	for _, data := range pcaptest.Frames(t, "../../testdata/pcap/rxe-perftest-pair.pcap") {
		m, err := Parse(data)
		if err == ErrNotNeighbor {
			continue
		}
		if err != nil {
			t.Fatalf("captured neighbour frame: %v", err)
		}
		switch {
		case !m.IPv6 && (m.Op == ARPRequest || m.Op == ARPReply) && m.SenderIP.Is4():
			arps++
		case m.IPv6 && (m.Op == TypeNeighborSolicitation || m.Op == TypeNeighborAdvertisement):
			nds++
		default:
			t.Fatalf("captured neighbour frame %+v", m)
		}
		// Nothing Linux sent makes the responder answer for addresses it does not own.
		if reply, _ := responder().Handle(data, nil); len(reply) != 0 {
			t.Fatalf("answered %+v", m)
		}
	}
	if arps == 0 || nds == 0 {
		t.Fatalf("%d ARP and %d ND frames in the capture", arps, nds)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(AppendARP(nil, ARPRequest, Broadcast, peerMAC, peerIP, [6]byte{}, ourIP))
	f.Add(AppendNS(nil, peerMAC, peerLL, ourLL))
	f.Add(AppendNA(nil, ourMAC, ourLL, peerMAC, peerLL))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 0x86, 0xdd, 0x60})
	f.Fuzz(func(t *testing.T, frame []byte) {
		r := responder()
		reply, _ := r.Handle(frame, nil)
		if len(reply) > 0 {
			if _, err := Parse(reply); err != nil {
				t.Fatalf("the answer does not parse: %v", err)
			}
		}
	})
}
