package wire_test

import (
	"fmt"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/softirdma/softirdma/wire"
)

// Build a frame, parse it back and read its headers through the views.
func Example() {
	b := wire.NewBuilder(wire.Path{
		SrcIP: netip.MustParseAddr("192.168.77.2"), DstIP: netip.MustParseAddr("192.168.77.3"),
		SrcPort: 49441,
	})
	h := wire.Header{Opcode: wire.RCWriteFirst, DestQP: 0x11, PSN: 100, VA: 0x1000, RKey: 0x2a6, DMALen: 2048}
	frame, err := b.Build(make([]byte, 2048), &h, make([]byte, 1024))
	if err != nil {
		panic(err)
	}
	var p wire.Parser
	var f wire.Frame
	err = p.Parse(&f, frame)
	fmt.Println(len(frame), err, f.Opcode, f.BTH.DestQP(), f.BTH.PSN(), f.RETH.RKey(), f.RETH.DMALen(), len(f.Payload))

	frame[len(frame)-10] ^= 1 // a flipped payload bit
	err = p.Parse(&f, frame)
	fmt.Println(err, wire.KindOf(err) == wire.KindBadICRC)
	// Output:
	// 1098 <nil> RC_RDMA_WRITE_FIRST 17 100 678 2048 1024
	// wire: bad ICRC: the ICRC does not match the frame true
}

// Importing wire registers the RoCEv2 layer on UDP port 4791 for any gopacket user.
func ExampleRoCEv2() {
	b := wire.NewBuilder(wire.Path{SrcIP: netip.MustParseAddr("fd00::2"), DstIP: netip.MustParseAddr("fd00::3")})
	h := wire.Header{Opcode: wire.RCAcknowledge, DestQP: 0x12, PSN: 7, Syndrome: wire.NAKRemoteAccess, MSN: 3}
	frame, _ := b.Build(make([]byte, 128), &h, nil)

	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	r := pkt.Layer(wire.LayerTypeRoCEv2).(*wire.RoCEv2)
	fmt.Println(r.Opcode, r.DestQP, r.PSN, r.Syndrome, r.MSN)
	// Output: RC_ACKNOWLEDGE 18 7 NAK_REM_ACCESS 3
}
