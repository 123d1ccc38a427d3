package engine_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// dgNode is a device on the fabric with a datagram QP, its CQ and a registered buffer.
type dgNode struct {
	dev *engine.Device
	pd  *engine.PD
	cq  *engine.CQ
	qp  *engine.QP
	buf []byte
	mr  *engine.MR
}

// dgNet is devices on one simulated fabric, each with a UD QP, and the fabric's capture.
type dgNet struct {
	t     *testing.T
	sim   *sim.Sim
	fab   *sim.Fabric
	nodes []*dgNode
	pcap  bytes.Buffer
}

const testQKey = 0x11111111

// newDgNet makes a fabric with one device per address (none: 192.0.2.N), each with a UD QP
// with Q_Key testQKey in RTS.
func newDgNet(t *testing.T, n int, addrs ...netip.Addr) *dgNet {
	t.Helper()
	s := sim.NewSim()
	dn := &dgNet{t: t, sim: s, fab: sim.NewFabric(s, 1)}
	must(t, dn.fab.CapturePcap(&dn.pcap))
	for i := range n {
		var dev *engine.Device
		if i < len(addrs) {
			dev = dn.fab.AddDeviceAt(string(rune('A'+i)), [6]byte{2, 0, 0, 0, 1, byte(i + 1)}, addrs[i], sim.LinkConfig{})
		} else {
			dev = dn.fab.AddDevice(string(rune('A'+i)), sim.LinkConfig{})
		}
		dn.nodes = append(dn.nodes, newDgNode(t, dev, engine.QPTypeUD, testQKey))
	}
	return dn
}

// twoDgNodes is a datagram network of two nodes, A and B.
func twoDgNodes(t *testing.T) (dn *dgNet, a, b *dgNode) {
	t.Helper()
	dn = newDgNet(t, 2)
	return dn, dn.nodes[0], dn.nodes[1]
}

// newNode makes a PD, a CQ, a QP of typ in RESET and a 64 KiB buffer registered with access on
// dev.
func newNode(t *testing.T, dev *engine.Device, typ engine.QPType, access engine.Access) *dgNode {
	t.Helper()
	nd := &dgNode{dev: dev, buf: make([]byte, 64<<10)}
	var err error
	nd.pd, err = dev.AllocPD()
	must(t, err)
	nd.cq, err = dev.CreateCQ(256)
	must(t, err)
	nd.qp, err = nd.pd.CreateQP(engine.QPInitAttr{Type: typ, SendCQ: nd.cq, RecvCQ: nd.cq,
		Cap: engine.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
	must(t, err)
	nd.mr, err = nd.pd.RegMR(nd.buf, access)
	must(t, err)
	return nd
}

// newDgNode is newNode's datagram QP (UD or GSI) with Q_Key qkey, in RTS from PSN 100.
func newDgNode(t *testing.T, dev *engine.Device, typ engine.QPType, qkey uint32) *dgNode {
	t.Helper()
	nd := newNode(t, dev, typ, engine.AccessLocalWrite)
	init := engine.AttrState | engine.AttrPKeyIndex | engine.AttrQKey
	if typ == engine.QPTypeUD {
		init |= engine.AttrPort
	}
	must(t, nd.qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, QKey: qkey}, init))
	must(t, nd.qp.Modify(engine.QPAttr{State: engine.QPSRTR}, engine.AttrState))
	must(t, nd.qp.Modify(engine.QPAttr{State: engine.QPSRTS, SQPSN: 100}, engine.AttrState|engine.AttrSQPSN))
	return nd
}

// ah makes an address handle on nd for dst.
func (nd *dgNode) ah(t *testing.T, dst netip.Addr) *engine.AH {
	t.Helper()
	ah, err := nd.pd.CreateAH(engine.AHAttr{DGID: dst, HopLimit: 64})
	must(t, err)
	return ah
}

// recv posts a receive of n bytes at off of nd's buffer.
func (nd *dgNode) recv(t *testing.T, id, off uint64, n uint32) {
	t.Helper()
	must(t, nd.qp.PostRecv(engine.RecvWR{ID: id, SGL: sge(nd.mr, off, n)}))
}

// send posts a signalled datagram of n bytes from off of nd's buffer.
func (nd *dgNode) send(t *testing.T, id uint64, op engine.WROpcode, ah *engine.AH, qpn, qkey uint32, off uint64, n uint32) {
	t.Helper()
	must(t, nd.qp.PostSend(engine.SendWR{ID: id, Opcode: op, Flags: engine.SendSignaled, SGL: sge(nd.mr, off, n),
		Imm: 0xC0FFEE, AH: ah, RemoteQPN: qpn, RemoteQKey: qkey}))
}

func (dn *dgNet) run() {
	dn.t.Helper()
	if n := dn.sim.RunUntilIdle(1_000_000); n == 1_000_000 {
		dn.t.Fatal("simulation still busy")
	}
}

// frames are the captured frames, parsed, with copies of their bytes.
func (dn *dgNet) frames() []wireFrame {
	var out []wireFrame
	eachCapturedFrame(dn.t, &dn.pcap, func(f *wire.Frame, _ gopacket.CaptureInfo) {
		out = append(out, wireFrame{raw: bytes.Clone(f.Buf), hdr: f.Header(), src: f.SrcIP(), dst: f.DstIP(), l3: f.L3, l4: f.L4,
			sport: binary.BigEndian.Uint16(f.Buf[f.L4:]), payload: bytes.Clone(f.Payload)})
	})
	return out
}

type wireFrame struct {
	raw      []byte
	hdr      wire.Header
	src, dst netip.Addr
	l3, l4   int
	sport    uint16
	payload  []byte
}

// rxeSrcPort is the UDP source port rxe gives QP qpn: 0xC000 + hash_32(qpn, 14).
func rxeSrcPort(qpn uint32) uint16 { return 0xC000 | uint16((qpn*0x61C88647)>>18) }

// TestConformanceUD holds the datagram checks, D1 on; GSI's are G1 on.
func TestConformanceUD(t *testing.T) {
	t.Run("D1_send_deth_grh_ipv4", func(t *testing.T) {
		dn, a, b := twoDgNodes(t)
		fill(a.buf[:1024], 3)
		b.recv(t, 7, 0, 2048)
		b.recv(t, 8, 4096, 2048)
		ah := a.ah(t, b.dev.IP())
		a.send(t, 1, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 1000)
		a.send(t, 2, engine.WRSendWithImm, ah, b.qp.Num(), testQKey, 0, 24)
		dn.run()
		wantWC(t, poll(a.cq), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCSend})
		got := poll(b.cq)
		wantWC(t, got, engine.WC{WRID: 7, Opcode: engine.WCRecv, ByteLen: 40 + 1000, Flags: engine.WCWithGRH},
			engine.WC{WRID: 8, Opcode: engine.WCRecv, ByteLen: 40 + 24, Flags: engine.WCWithGRH | engine.WCWithImm, Imm: 0xC0FFEE})
		for _, wc := range got {
			if wc.SrcQP != a.qp.Num() || wc.NetworkHdrType != engine.NetworkIPv4 {
				t.Fatalf("source QP 0x%x, network header %d; want 0x%x, IPv4", wc.SrcQP, wc.NetworkHdrType, a.qp.Num())
			}
		}
		fr := dn.frames()
		if len(fr) != 2 {
			t.Fatalf("%d frames on the wire, want 2 (nothing acknowledged)", len(fr))
		}
		for i, op := range []wire.Opcode{wire.UDSendOnly, wire.UDSendOnlyImm} {
			h := fr[i].hdr
			if h.Opcode != op || h.AckReq || h.PKey != 0xFFFF || h.DestQP != b.qp.Num() || h.PSN != uint32(100+i) ||
				h.QKey != testQKey || h.SrcQP != a.qp.Num() || fr[i].sport != rxeSrcPort(a.qp.Num()) {
				t.Fatalf("frame %d: %+v, UDP source port %d", i, h, fr[i].sport)
			}
		}
		// The GRH area: 20 zero bytes, then the IPv4 header as it arrived, checksum valid.
		grh := b.buf[:40]
		if !bytes.Equal(grh[:20], make([]byte, 20)) || !bytes.Equal(grh[20:40], fr[0].raw[fr[0].l3:fr[0].l3+20]) {
			t.Fatalf("GRH area % x\nIPv4 header % x", grh, fr[0].raw[fr[0].l3:fr[0].l3+20])
		}
		if ipv4Sum(grh[20:40]) != 0xFFFF {
			t.Fatalf("IPv4 header checksum in the GRH area does not verify: % x", grh[20:40])
		}
		if !bytes.Equal(b.buf[40:1040], a.buf[:1000]) || !bytes.Equal(b.buf[4096+40:4096+64], a.buf[:24]) {
			t.Fatal("datagram data differs")
		}
	})

	t.Run("D2_grh_ipv6", func(t *testing.T) {
		dn := newDgNet(t, 2, netip.MustParseAddr("2001:db8::a"), netip.MustParseAddr("2001:db8::b"))
		a, b := dn.nodes[0], dn.nodes[1]
		fill(a.buf[:64], 5)
		b.recv(t, 1, 0, 256)
		a.send(t, 1, engine.WRSend, a.ah(t, b.dev.IP()), b.qp.Num(), testQKey, 0, 64)
		dn.run()
		got := poll(b.cq)
		wantWC(t, got, engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 40 + 64, Flags: engine.WCWithGRH})
		if got[0].NetworkHdrType != engine.NetworkIPv6 {
			t.Fatalf("network header %d, want IPv6", got[0].NetworkHdrType)
		}
		fr := dn.frames()
		if !bytes.Equal(b.buf[:40], fr[0].raw[fr[0].l3:fr[0].l3+40]) || b.buf[0]>>4 != 6 || b.buf[6] != 17 {
			t.Fatalf("GRH area % x is not the IPv6 header", b.buf[:40])
		}
		if !bytes.Equal(b.buf[40:104], a.buf[:64]) {
			t.Fatal("datagram data differs")
		}
	})

	t.Run("D3_qkey_mismatch_dropped_and_counted", func(t *testing.T) {
		dn, a, b := twoDgNodes(t)
		b.recv(t, 1, 0, 256)
		ah := a.ah(t, b.dev.IP())
		a.send(t, 1, engine.WRSend, ah, b.qp.Num(), 0x22222222, 0, 16)
		dn.run()
		wantWC(t, poll(a.cq), engine.WC{WRID: 1, Opcode: engine.WCSend}) // nothing says it was dropped
		if got := poll(b.cq); len(got) != 0 {
			t.Fatalf("the receiver completed %s", fmtWC(got))
		}
		if st := b.dev.Stats(); st.RxBadQKey != 1 || st.RxDropped != 1 {
			t.Fatalf("stats %+v: want one Q_Key drop", st)
		}
		a.send(t, 2, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 16)
		dn.run()
		wantWC(t, poll(b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 56, Flags: engine.WCWithGRH})
	})

	t.Run("D4_controlled_qkey", func(t *testing.T) {
		dn, a, b := twoDgNodes(t)
		// A's QP takes B's Q_Key as its own; its work request asks for the QP's by the high bit.
		must(t, a.qp.Modify(engine.QPAttr{QKey: testQKey}, engine.AttrQKey))
		b.recv(t, 1, 0, 256)
		a.send(t, 1, engine.WRSend, a.ah(t, b.dev.IP()), b.qp.Num(), 0x80000000|0x1234, 0, 8)
		dn.run()
		wantWC(t, poll(b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 48, Flags: engine.WCWithGRH})
		if q := dn.frames()[0].hdr.QKey; q != testQKey {
			t.Fatalf("DETH Q_Key 0x%x, want the QP's 0x%x", q, testQKey)
		}
	})

	t.Run("D5_larger_than_mtu_not_sent_success", func(t *testing.T) {
		dn, a, b := twoDgNodes(t)
		b.recv(t, 1, 0, 8192)
		ah := a.ah(t, b.dev.IP())
		a.send(t, 1, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 4097) // the path MTU is 4096
		a.send(t, 2, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 4096)
		dn.run()
		wantWC(t, poll(a.cq), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCSend})
		fr := dn.frames()
		if len(fr) != 1 || len(fr[0].payload) != 4096 || fr[0].hdr.PSN != 101 {
			t.Fatalf("%d frames; want one of 4096 bytes with PSN 101 (the first datagram used PSN 100)", len(fr))
		}
		wantWC(t, poll(b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 40 + 4096, Flags: engine.WCWithGRH})
	})

	t.Run("D6_loopback", func(t *testing.T) {
		dn := newDgNet(t, 1)
		a := dn.nodes[0]
		b := newDgNode(t, a.dev, engine.QPTypeUD, testQKey)
		fill(a.buf[:100], 9)
		b.recv(t, 1, 0, 256)
		a.send(t, 1, engine.WRSend, a.ah(t, a.dev.IP()), b.qp.Num(), testQKey, 0, 100)
		dn.run()
		wantWC(t, poll(a.cq), engine.WC{WRID: 1, Opcode: engine.WCSend})
		wantWC(t, poll(b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 140, Flags: engine.WCWithGRH})
		if !bytes.Equal(b.buf[40:140], a.buf[:100]) || b.buf[20]>>4 != 4 {
			t.Fatal("looped back datagram differs")
		}
		if st := a.dev.Stats(); st.Loopback != 1 || len(dn.frames()) != 0 {
			t.Fatalf("loopback %d, %d frames on the wire", st.Loopback, len(dn.frames()))
		}
	})

	t.Run("D7_multicast", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			group netip.Addr
			mac   [6]byte
		}{
			{"ipv4", netip.MustParseAddr("239.1.2.3"), [6]byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}},
			{"ipv6", netip.MustParseAddr("ff0e::12:3456"), [6]byte{0x33, 0x33, 0x00, 0x12, 0x34, 0x56}},
		} {
			t.Run(c.name, func(t *testing.T) {
				var addrs []netip.Addr
				if c.group.Is6() {
					addrs = []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("2001:db8::3")}
				}
				dn := newDgNet(t, 3, addrs...)
				a, b, c3 := dn.nodes[0], dn.nodes[1], dn.nodes[2]
				must(t, b.qp.AttachMcast(c.group))
				must(t, b.qp.AttachMcast(c.group)) // twice is no error
				must(t, c3.qp.AttachMcast(c.group))
				for _, nd := range []*dgNode{b, c3} {
					nd.recv(t, 1, 0, 256)
					nd.recv(t, 2, 256, 256)
				}
				fill(a.buf[:32], 1)
				ah := a.ah(t, c.group)
				a.send(t, 1, engine.WRSend, ah, engine.McastQPN, testQKey, 0, 32)
				dn.run()
				for _, nd := range []*dgNode{b, c3} {
					got := poll(nd.cq)
					wantWC(t, got, engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 72, Flags: engine.WCWithGRH})
					if got[0].SrcQP != a.qp.Num() || !bytes.Equal(nd.buf[40:72], a.buf[:32]) {
						t.Fatalf("%s: source QP 0x%x or data differs", nd.dev.Name(), got[0].SrcQP)
					}
				}
				fr := dn.frames()
				if len(fr) != 1 || [6]byte(fr[0].raw[:6]) != c.mac || fr[0].dst != c.group || fr[0].hdr.DestQP != engine.McastQPN {
					t.Fatalf("%d frames; the first to %x %s QP 0x%x", len(fr), fr[0].raw[:6], fr[0].dst, fr[0].hdr.DestQP)
				}
				// Detached, B hears nothing more; C still does.
				must(t, b.qp.DetachMcast(c.group))
				if err := b.qp.DetachMcast(c.group); !errors.Is(err, syscall.EINVAL) {
					t.Fatalf("detaching twice: %v, want EINVAL", err)
				}
				a.send(t, 2, engine.WRSend, ah, engine.McastQPN, testQKey, 0, 32)
				dn.run()
				if got := poll(b.cq); len(got) != 0 {
					t.Fatalf("detached QP received %s", fmtWC(got))
				}
				wantWC(t, poll(c3.cq), engine.WC{WRID: 2, Opcode: engine.WCRecv, ByteLen: 72, Flags: engine.WCWithGRH})
			})
		}
		// A group one of the sender's own QPs is attached to: the datagram goes out on the wire
		// and comes back to that QP too (the sender's own included), as rxe's comes back
		// through the IP stack's multicast loop.
		t.Run("loops_back_to_attached_local_qps", func(t *testing.T) {
			group := netip.MustParseAddr("239.9.9.9")
			dn, a, b := twoDgNodes(t)
			must(t, a.qp.AttachMcast(group))
			must(t, b.qp.AttachMcast(group))
			a.recv(t, 1, 256, 256)
			b.recv(t, 1, 0, 256)
			fill(a.buf[:32], 7)
			a.send(t, 5, engine.WRSend, a.ah(t, group), engine.McastQPN, testQKey, 0, 32)
			dn.run()
			var recv []engine.WC
			for _, wc := range poll(a.cq) {
				if wc.Opcode == engine.WCRecv {
					recv = append(recv, wc)
				}
			}
			if len(recv) != 1 || recv[0].SrcQP != a.qp.Num() || !bytes.Equal(a.buf[256+40:256+72], a.buf[:32]) {
				t.Fatalf("the sender's device: receives %s", fmtWC(recv))
			}
			wantWC(t, poll(b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 72, Flags: engine.WCWithGRH})
			if fr := dn.frames(); len(fr) != 1 {
				t.Fatalf("%d frames on the wire", len(fr))
			}
			// Detached, the sender's device keeps nothing back.
			must(t, a.qp.DetachMcast(group))
			a.recv(t, 2, 256, 256)
			a.send(t, 6, engine.WRSend, a.ah(t, group), engine.McastQPN, testQKey, 0, 32)
			dn.run()
			for _, wc := range poll(a.cq) {
				if wc.Opcode == engine.WCRecv {
					t.Fatalf("a detached device received %s", fmtWC([]engine.WC{wc}))
				}
			}
		})
		dn := newDgNet(t, 1)
		rc, err := dn.nodes[0].pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: dn.nodes[0].cq, RecvCQ: dn.nodes[0].cq,
			Cap: engine.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		must(t, err)
		if err := rc.AttachMcast(netip.MustParseAddr("239.1.1.1")); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("attach on an RC QP: %v, want EINVAL", err)
		}
		if err := dn.nodes[0].qp.AttachMcast(netip.MustParseAddr("10.0.0.1")); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("attach to a unicast address: %v, want EINVAL", err)
		}
	})

	t.Run("D8_pkey", func(t *testing.T) {
		dn, a, b := twoDgNodes(t)
		b.recv(t, 1, 0, 256)
		b.recv(t, 2, 256, 256)
		a.send(t, 1, engine.WRSend, a.ah(t, b.dev.IP()), b.qp.Num(), testQKey, 0, 16)
		dn.run()
		raw := dn.frames()[0].raw
		var p wire.Parser
		for _, c := range []struct {
			pkey uint16
			ok   bool
		}{{0x1234, false}, {0x7FFF, true}, {0x0000, false}} {
			f := bytes.Clone(raw)
			var fr wire.Frame
			must(t, p.Parse(&fr, f))
			fr.BTH.SetPKey(c.pkey)
			p.Reseal(&fr)
			before := b.dev.Stats().RxBadPKey
			b.dev.Receive(f)
			if bad := b.dev.Stats().RxBadPKey - before; bad != map[bool]uint64{true: 0, false: 1}[c.ok] {
				t.Fatalf("P_Key 0x%04x: %d bad P_Key drops", c.pkey, bad)
			}
		}
		wantWC(t, poll(b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 56, Flags: engine.WCWithGRH},
			engine.WC{WRID: 2, Opcode: engine.WCRecv, ByteLen: 56, Flags: engine.WCWithGRH})
	})

	t.Run("D9_no_receive_dropped", func(t *testing.T) {
		dn, a, b := twoDgNodes(t)
		ah := a.ah(t, b.dev.IP())
		a.send(t, 1, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 16)
		dn.run()
		if st := b.dev.Stats(); st.RxNoRecv != 1 || len(poll(b.cq)) != 0 || b.qp.State() != engine.QPSRTS {
			t.Fatalf("stats %+v, state %s", st, b.qp.State())
		}
		b.recv(t, 1, 0, 64)
		a.send(t, 2, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 16)
		dn.run()
		wantWC(t, poll(b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 56, Flags: engine.WCWithGRH})
	})

	t.Run("D10_receive_too_short", func(t *testing.T) {
		// Without an SRQ the datagram is dropped and the receive waits for the next one.
		dn, a, b := twoDgNodes(t)
		ah := a.ah(t, b.dev.IP())
		b.recv(t, 1, 0, 100)
		a.send(t, 1, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 61) // 101 with the GRH area
		a.send(t, 2, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 60)
		dn.run()
		wantWC(t, poll(b.cq), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 100, Flags: engine.WCWithGRH})
		// From an SRQ the receive is taken and completes with REM_INV_REQ_ERR; the QP stays up.
		srq := newSRQ(t, b.pd, 4, 1)
		q, err := b.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeUD, SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq, Cap: engine.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
		must(t, err)
		must(t, q.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, QKey: testQKey}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrQKey))
		must(t, q.Modify(engine.QPAttr{State: engine.QPSRTR}, engine.AttrState))
		must(t, srq.PostRecv(engine.RecvWR{ID: 5, SGL: sge(b.mr, 0, 100)}, engine.RecvWR{ID: 6, SGL: sge(b.mr, 128, 100)}))
		a.send(t, 3, engine.WRSend, ah, q.Num(), testQKey, 0, 61)
		a.send(t, 4, engine.WRSend, ah, q.Num(), testQKey, 0, 60)
		dn.run()
		wantWC(t, poll(b.cq), engine.WC{WRID: 5, Status: engine.WCRemInvReqErr, Opcode: engine.WCRecv},
			engine.WC{WRID: 6, Opcode: engine.WCRecv, ByteLen: 100, Flags: engine.WCWithGRH})
		if q.State() != engine.QPSRTR {
			t.Fatalf("state %s, want RTR", q.State())
		}
	})

	t.Run("D11_state_machine_and_post", func(t *testing.T) {
		dn := newDgNet(t, 2)
		a := dn.nodes[0]
		q, err := a.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeUD, SendCQ: a.cq, RecvCQ: a.cq, Cap: engine.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1}})
		must(t, err)
		for _, c := range []struct {
			attr engine.QPAttr
			mask engine.AttrMask
			ok   bool
		}{
			{engine.QPAttr{State: engine.QPSInit}, engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort, false}, // no Q_Key
			{engine.QPAttr{State: engine.QPSInit, AccessFlags: engine.AccessRemoteWrite}, engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrQKey | engine.AttrAccessFlags, false},
			{engine.QPAttr{State: engine.QPSInit, QKey: 5}, engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrQKey, true},
			{engine.QPAttr{State: engine.QPSRTR, AH: engine.AHAttr{DGID: dn.nodes[1].dev.IP()}}, engine.AttrState | engine.AttrAV, false},
			{engine.QPAttr{State: engine.QPSRTR, PathMTU: engine.MTU1024}, engine.AttrState | engine.AttrPathMTU, false},
			{engine.QPAttr{State: engine.QPSRTR}, engine.AttrState, true},
			{engine.QPAttr{State: engine.QPSRTS}, engine.AttrState, false}, // no SQ PSN
			{engine.QPAttr{State: engine.QPSRTS, SQPSN: 1, Timeout: 14}, engine.AttrState | engine.AttrSQPSN | engine.AttrTimeout, false},
			{engine.QPAttr{State: engine.QPSRTS, SQPSN: 1, QKey: 6}, engine.AttrState | engine.AttrSQPSN | engine.AttrQKey, true},
		} {
			err := q.Modify(c.attr, c.mask)
			if (err == nil) != c.ok || err != nil && !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("modify to %s with mask 0x%x: %v, want ok=%v", c.attr.State, uint32(c.mask), err, c.ok)
			}
		}
		if got := q.Query(); got.QKey != 6 || got.PathMTU != engine.MTU4096 {
			t.Fatalf("query: Q_Key %d, path MTU %d", got.QKey, got.PathMTU.Bytes())
		}
		// An RC QP takes no Q_Key.
		rc, err := a.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: engine.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		must(t, err)
		if err := rc.Modify(engine.QPAttr{State: engine.QPSInit, QKey: 1}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags|engine.AttrQKey); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("RC with a Q_Key: %v", err)
		}
		ah := a.ah(t, dn.nodes[1].dev.IP())
		for _, wr := range []engine.SendWR{
			{Opcode: engine.WRRDMAWrite, AH: ah},
			{Opcode: engine.WRRDMARead, AH: ah},
			{Opcode: engine.WRLocalInv, AH: ah},
			{Opcode: engine.WRSend}, // no address handle
		} {
			if err := q.PostSend(wr); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("post %s: %v, want EINVAL", wr.Opcode, err)
			}
		}
		if _, err := a.pd.CreateAH(engine.AHAttr{DGID: netip.MustParseAddr("192.0.2.200")}); !errors.Is(err, syscall.EHOSTUNREACH) {
			t.Fatalf("address handle to nobody: %v", err)
		}
	})
}

// TestConformanceGSI holds the GSI QP's checks.
func TestConformanceGSI(t *testing.T) {
	t.Run("G1_mad_from_any_source_with_grh", func(t *testing.T) {
		// MADs come from A's GSI QP and from a UD QP on B that holds the GSI Q_Key (a work
		// request cannot name a Q_Key with the high bit set: that asks for the QP's own).
		dn := newDgNet(t, 3)
		a, b := newDgNode(t, dn.nodes[0].dev, engine.QPTypeGSI, engine.GSIQKey), dn.nodes[1]
		must(t, b.qp.Modify(engine.QPAttr{QKey: engine.GSIQKey}, engine.AttrQKey))
		gsi := newDgNode(t, dn.nodes[2].dev, engine.QPTypeGSI, engine.GSIQKey)
		if gsi.qp.Num() != 1 {
			t.Fatalf("GSI QP number %d", gsi.qp.Num())
		}
		if _, err := gsi.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeGSI, SendCQ: gsi.cq, RecvCQ: gsi.cq, Cap: engine.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}); !errors.Is(err, syscall.EBUSY) {
			t.Fatalf("a second GSI QP: %v, want EBUSY", err)
		}
		for i := range 3 {
			gsi.recv(t, uint64(i+1), uint64(i)*512, 512)
		}
		mad := func(nd *dgNode, id uint64, qkey uint32) {
			fill(nd.buf[id*256:id*256+256], byte(id))
			nd.send(t, id, engine.WRSend, nd.ah(t, gsi.dev.IP()), 1, qkey, id*256, 256)
		}
		mad(a, 1, engine.GSIQKey)
		mad(b, 2, engine.GSIQKey)
		dn.run() // the Q_Key is read when the datagram is sent
		must(t, b.qp.Modify(engine.QPAttr{QKey: testQKey}, engine.AttrQKey))
		mad(b, 3, testQKey) // not the GSI Q_Key: dropped
		dn.run()
		got := poll(gsi.cq)
		wantWC(t, got, engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 296, Flags: engine.WCWithGRH},
			engine.WC{WRID: 2, Opcode: engine.WCRecv, ByteLen: 296, Flags: engine.WCWithGRH})
		if gsi.dev.Stats().RxBadQKey != 1 {
			t.Fatalf("%d Q_Key drops, want 1", gsi.dev.Stats().RxBadQKey)
		}
		// The receives fill in arrival order: each holds its sender's address in its GRH area
		// and its sender's MAD after it.
		for i, wc := range got {
			from := map[uint32]*dgNode{a.qp.Num(): a, b.qp.Num(): b}[wc.SrcQP]
			off := map[uint32]int{a.qp.Num(): 256, b.qp.Num(): 512}[wc.SrcQP]
			if from == nil || wc.SrcQP == got[1-i].SrcQP {
				t.Fatalf("sources 0x%x and 0x%x", got[0].SrcQP, got[1].SrcQP)
			}
			area := gsi.buf[uint64(wc.WRID-1)*512:]
			want := from.dev.IP().As4()
			if !bytes.Equal(area[20+12:20+16], want[:]) || !bytes.Equal(area[40:296], from.buf[off:off+256]) {
				t.Fatalf("receive %d: GRH source % x or MAD differs from %s's", wc.WRID, area[32:36], from.dev.Name())
			}
		}
		// QP1 answers with source QP 1 and the GSI Q_Key whatever the request says.
		a.recv(t, 9, 0, 512)
		gsi.send(t, 4, engine.WRSend, gsi.ah(t, a.dev.IP()), 1, 0x1234, 0, 256)
		dn.run()
		fr := dn.frames()
		last := fr[len(fr)-1].hdr
		if last.SrcQP != 1 || last.DestQP != 1 || last.QKey != engine.GSIQKey || !last.AckReq {
			t.Fatalf("QP1's datagram: %+v", last)
		}
		wantWC(t, poll(a.cq), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 9, Opcode: engine.WCRecv, ByteLen: 296, Flags: engine.WCWithGRH})
	})
}

// ipv4Sum is the one's complement sum of an IPv4 header: 0xFFFF when its checksum is right.
func ipv4Sum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

// TestSendPostedCompletesDatagrams: QP.SendPosted runs the requester on the caller's goroutine,
// so the UD sends posted before it have completed when it returns, with the device's clock not
// run; the frames then arrive as the clock runs.
func TestSendPostedCompletesDatagrams(t *testing.T) {
	dn, a, b := twoDgNodes(t)
	ah := a.ah(t, b.dev.IP())
	for i := range 3 {
		b.recv(t, uint64(10+i), uint64(i)*0x100, 0x100)
		a.send(t, uint64(i+1), engine.WRSend, ah, b.qp.Num(), testQKey, 0, 16)
	}
	if wcs := poll(a.cq); len(wcs) != 0 {
		t.Fatalf("completions before the clock ran: %+v", wcs)
	}
	a.qp.SendPosted()
	wcs := poll(a.cq)
	if len(wcs) != 3 {
		t.Fatalf("after SendPosted: %+v", wcs)
	}
	for i, wc := range wcs {
		if wc.WRID != uint64(i+1) || wc.Status != engine.WCSuccess || wc.Opcode != engine.WCSend {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	dn.run()
	if got := poll(b.cq); len(got) != 3 || got[2].WRID != 12 || got[2].Status != engine.WCSuccess {
		t.Fatalf("receives: %+v", got)
	}
	if frames := dn.frames(); len(frames) != 3 {
		t.Fatalf("%d frames on the wire, want 3", len(frames))
	}
}
