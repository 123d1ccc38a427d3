package engine_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
)

// ethFrame is an Ethernet frame from src to dst of the given type with a payload of n bytes.
func ethFrame(dst, src [6]byte, etherType uint16, n int) []byte {
	f := make([]byte, 14+n)
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:14], etherType)
	for i := range n {
		f[14+i] = byte(i)
	}
	return f
}

// The Ethernet side of a device: what is not RoCEv2 for it (an ARP frame, an IPv4 packet for
// another port, RoCEv2 for an address it does not own) reaches its OnOtherFrame function, in
// order and whole; SendFrame puts a netdev's frames on the link, and one to itself loops back.
// Without the function such frames are dropped, as before.
func TestOtherFrames(t *testing.T) {
	p := plainPair(t)
	var got [][]byte
	p.b.OnOtherFrame(func(f []byte) { got = append(got, f) })
	arp := ethFrame(p.b.MAC(), p.a.MAC(), 0x0806, 28)
	// An IPv4 UDP datagram to port 53: version 4, IHL 5, protocol 17.
	udp := ethFrame(p.b.MAC(), p.a.MAC(), 0x0800, 40)
	udp[14], udp[14+9] = 0x45, 17
	binary.BigEndian.PutUint16(udp[14+2:], 40)
	binary.BigEndian.PutUint16(udp[14+20+2:], 53)
	binary.BigEndian.PutUint16(udp[14+20+4:], 20)
	// B's own QP traffic stays the engine's.
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, ByteLen: 64})
	p.a.SendFrame(arp)
	p.a.SendFrame(udp)
	p.run()
	if len(got) != 2 || !bytes.Equal(got[0], arp) || !bytes.Equal(got[1], udp) {
		t.Fatalf("B's other frames: %d, want the ARP and the UDP frame", len(got))
	}
	// Without a function: dropped and counted.
	p.b.OnOtherFrame(nil)
	before := p.b.Stats().RxDropped
	p.a.SendFrame(arp)
	p.run()
	if p.b.Stats().RxDropped != before+1 || len(got) != 2 {
		t.Fatalf("with no function: RxDropped %d (was %d), %d frames", p.b.Stats().RxDropped, before, len(got))
	}
	p.b.OnOtherFrame(func(f []byte) { got = append(got, f) })

	// To itself: A's frame to its own MAC and IP comes back to A's function.
	var self [][]byte
	p.a.OnOtherFrame(func(f []byte) { self = append(self, f) })
	loop := bytes.Clone(udp)
	mac := p.a.MAC()
	copy(loop[0:6], mac[:])
	ip := p.a.IP().As4()
	binary.BigEndian.PutUint32(loop[14+16:], binary.BigEndian.Uint32(ip[:]))
	p.a.SendFrame(loop)
	p.run()
	if len(self) != 1 || !bytes.Equal(self[0], loop) {
		t.Fatalf("A's frame to itself: %d frames back", len(self))
	}

	// RoCEv2 to an address B no longer owns goes to its Ethernet side.
	p.b.SetAddresses(p.b.MAC(), netip.MustParseAddr("192.0.2.99"), nil)
	must(t, p.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	p.sim.RunFor(time.Millisecond)
	if len(got) < 3 || binary.BigEndian.Uint16(got[2][14+20+2:]) != 4791 {
		t.Fatalf("B's other frames after it gave up its address: %d", len(got))
	}
	if st := p.b.Stats(); st.RxOther < 3 || p.a.Stats().TxOther != 4 {
		t.Fatalf("RxOther %d TxOther %d", st.RxOther, p.a.Stats().TxOther)
	}
}

// callLink hands a frame to the other device at once and lends no buffers, as a host's link.
type callLink struct{ to *engine.Device }

func (l callLink) Send(frame []byte) error {
	l.to.Receive(frame)
	return nil
}

// A netdev's small frame sent on a link that lends no buffers does not come back as the buffer
// of a full-size RoCE frame: a 4 KiB WRITE after it still goes out.
func TestSendFrameBufferNotReused(t *testing.T) {
	clock := realtime.NewWallClock()
	macA, macB := [6]byte{2, 0, 0, 0, 0, 0xa}, [6]byte{2, 0, 0, 0, 0, 0xb}
	a := engine.NewDevice(engine.DeviceConfig{Name: "A", Clock: clock, MAC: macA, IP: netip.MustParseAddr("192.0.2.10"),
		Resolve: func(netip.Addr) ([6]byte, bool) { return macB, true }})
	b := engine.NewDevice(engine.DeviceConfig{Name: "B", Clock: clock, MAC: macB, IP: netip.MustParseAddr("192.0.2.11"),
		Resolve: func(netip.Addr) ([6]byte, bool) { return macA, true }})
	a.Attach(callLink{to: b})
	b.Attach(callLink{to: a})
	b.OnOtherFrame(func([]byte) {})
	_, pdB, cqA, _, qa, qb := qpPair(t, a, b, 4)
	must(t, engine.ConnectRC(qa, qb, engine.ConnectOptions{MTU: engine.MTU4096}))
	pdA := qa.PD()
	src, err := pdA.RegMR(make([]byte, 4096), engine.AccessLocalWrite)
	must(t, err)
	dst, err := pdB.RegMR(make([]byte, 4096), engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(t, err)
	for range 8 {
		a.SendFrame(ethFrame(macB, macA, 0x0806, 28))
	}
	must(t, qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(src, 0, 4096), RemoteAddr: dst.Addr(), RKey: dst.RKey()}))
	waitCQ(cqA, time.Now().Add(20*time.Second))
	wantWC(t, poll(cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, ByteLen: 4096})
}
