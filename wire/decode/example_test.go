package decode_test

import (
	"bytes"
	"net/netip"
	"os"
	"time"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/decode"
)

// A capture of an RDMA WRITE refused with NAK 0x62, decoded as softirdma decode -flows reports
// it: each frame with its ICRC checked, then the connection with its NAK.
func ExampleRun() {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	var pcap bytes.Buffer
	w, err := wire.NewPcapWriter(&pcap)
	check(err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, x := range []struct {
		path wire.Path
		h    wire.Header
		n    int
	}{
		{wire.Path{SrcIP: a, DstIP: b, SrcPort: 49152}, wire.Header{Opcode: wire.RCWriteOnly, DestQP: 0x12, PSN: 5, VA: 0x1000, RKey: 0x2a6, DMALen: 64}, 64},
		{wire.Path{SrcIP: b, DstIP: a, SrcPort: 49153}, wire.Header{Opcode: wire.RCAcknowledge, DestQP: 0x11, PSN: 5, Syndrome: wire.NAKRemoteAccess, MSN: 0}, 0},
	} {
		frame, err := wire.NewBuilder(x.path).Build(make([]byte, 256), &x.h, make([]byte, x.n))
		check(err)
		ts := t0.Add(time.Duration(i) * time.Microsecond)
		check(w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(frame), Length: len(frame)}, frame))
	}
	_, err = decode.Run(&pcap, os.Stdout, decode.Options{Flows: true})
	check(err)
	// Output:
	// 2026-01-01T00:00:00.000000Z #1 192.0.2.1 -> 192.0.2.2 sport=49152 RC_RDMA_WRITE_ONLY qp=0x000012 psn=5 va=0x1000 rkey=0x000002a6 len=64 payload=64 icrc=ok
	// 2026-01-01T00:00:00.000001Z #2 192.0.2.2 -> 192.0.2.1 sport=49153 RC_ACKNOWLEDGE qp=0x000011 psn=5 aeth=NAK_REM_ACCESS msn=0 payload=0 icrc=ok
	// flows: 1 RC connections
	// conn 192.0.2.2 qp=0x000012 <-> 192.0.2.1 qp=0x000011
	//   192.0.2.1 -> 192.0.2.2 qp=0x000012 sport=49152: packets=1 bytes=138 requests=1 responses=0 messages=1 psn=5..5 retransmits=0 gaps=0 missing_psns=0 dup_acks=0 restarts=0 icrc_bad=0 outstanding_reads=0 outstanding_atomics=0
	//     rkey 0x000002a6 uses=1 ops=WRITE first=2026-01-01T00:00:00.000000Z last=2026-01-01T00:00:00.000000Z
	//   192.0.2.2 -> 192.0.2.1 qp=0x000011 sport=49153: packets=1 bytes=62 requests=0 responses=1 messages=0 retransmits=0 gaps=0 missing_psns=0 dup_acks=0 restarts=0 icrc_bad=0 outstanding_reads=0 outstanding_atomics=0
	//     naks sent: NAK_REM_ACCESS=1
	// summary: frames=2 rocev2=2 icrc_ok=2 icrc_bad=0 malformed=0
}

// check stops the example at the first error: the calls it wraps fail only on a bug.
func check(err error) {
	if err != nil {
		panic(err)
	}
}
