package roce

import (
	"net/netip"
	"reflect"
	"testing"
)

// A Builder reuses its header template while sameTemplate says the path gives the same one, so
// sameTemplate must look at every field of Path but IPID, which each frame writes: a field
// added to Path and left out would send frames on a stale path.
func TestSameTemplateCoversEveryField(t *testing.T) {
	base := Path{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, VLAN: 5, HasVLAN: true,
		SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"), SrcPort: 49152,
		TrafficClass: 3, TTL: 64, FlowLabel: 7, IPID: 9}
	if !base.sameTemplate(&base) {
		t.Fatal("a path differs from itself")
	}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		changed := base
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch v.Kind() {
		case reflect.Array:
			v.Index(0).SetUint(v.Index(0).Uint() + 1)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32:
			v.SetUint(v.Uint() + 1)
		case reflect.Bool:
			v.SetBool(!v.Bool())
		default:
			a, ok := v.Interface().(netip.Addr)
			if !ok {
				t.Fatalf("Path.%s is a %s, which this test cannot change", typ.Field(i).Name, v.Type())
			}
			v.Set(reflect.ValueOf(a.Next()))
		}
		want := typ.Field(i).Name == "IPID"
		if got := base.sameTemplate(&changed); got != want {
			t.Errorf("Path.%s changed: sameTemplate %v, want %v", typ.Field(i).Name, got, want)
		}
	}
}

// A Builder whose Path changes between frames builds the next frame on the new path.
func TestBuilderFollowsPathChanges(t *testing.T) {
	p := Path{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"), SrcPort: 49152}
	b := NewBuilder(p)
	h := Header{Opcode: RCSendOnly, DestQP: 0x11, PSN: 1}
	build := func() []byte {
		f, _, err := b.Begin(make([]byte, 256), &h, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	first := build()
	b.Path.TTL = 9
	b.Path.DstIP = netip.MustParseAddr("10.0.0.3")
	second := build()
	if first[EthernetLen+8] != 64 || second[EthernetLen+8] != 9 {
		t.Errorf("TTL bytes %d then %d, want 64 then 9", first[EthernetLen+8], second[EthernetLen+8])
	}
	if got := netip.AddrFrom4([4]byte(second[EthernetLen+16 : EthernetLen+20])); got != b.Path.DstIP {
		t.Errorf("the second frame goes to %s, want %s", got, b.Path.DstIP)
	}
}

// SealFrame gives a frame Begin wrote the ICRC Seal would have: the same bytes, whatever the
// path (IPv4, IPv6, a VLAN tag) and the opcode's headers. A frame that is not RoCEv2 is refused
// and left as it was.
func TestSealFrameIsSeal(t *testing.T) {
	v4 := Path{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"), SrcPort: 49152, TTL: 64, IPID: 7}
	v6 := v4
	v6.SrcIP, v6.DstIP, v6.FlowLabel, v6.TrafficClass = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), 0x12345, 0x28
	vlan := v4
	vlan.HasVLAN, vlan.VLAN = true, 42
	for _, tc := range []struct {
		name string
		path Path
		h    Header
		n    int
	}{
		{"v4 write only", v4, Header{Opcode: RCWriteOnly, DestQP: 0x11, PSN: 5, VA: 0x1000, RKey: 0x2233, DMALen: 8}, 8},
		{"v4 send odd", v4, Header{Opcode: RCSendOnly, DestQP: 0x11, PSN: 0xFFFFFF, AckReq: true}, 3},
		{"v4 read response", v4, Header{Opcode: RCReadResponseOnly, DestQP: 0x11, PSN: 9, Syndrome: ACKUnlimited, MSN: 4}, 4096},
		{"v6 UD send", v6, Header{Opcode: UDSendOnly, DestQP: 0x12, PSN: 1, QKey: 0x11111111, SrcQP: 0x13}, 64},
		{"vlan ack", vlan, Header{Opcode: RCAcknowledge, DestQP: 0x11, PSN: 5, Syndrome: ACKUnlimited, MSN: 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder(tc.path)
			frame, slot, err := b.Begin(make([]byte, 8192), &tc.h, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			for i := range slot {
				slot[i] = byte(i * 7)
			}
			want := append([]byte(nil), frame...)
			b.Seal(want)
			icrc := frame[len(frame)-ICRCLen:]
			copy(icrc, []byte{0xDE, 0xAD, 0xBE, 0xEF}) // what the buffer held before
			if err := SealFrame(frame); err != nil {
				t.Fatal(err)
			}
			if string(frame) != string(want) {
				t.Fatalf("ICRC % x, Seal wrote % x", frame[len(frame)-ICRCLen:], want[len(want)-ICRCLen:])
			}
			var p Parser
			var f Frame
			if err := p.Parse(&f, frame); err != nil {
				t.Fatalf("the sealed frame does not parse: %v", err)
			}
		})
	}
	notRoCE := make([]byte, 64)
	notRoCE[12], notRoCE[13] = 0x08, 0x06 // ARP
	before := append([]byte(nil), notRoCE...)
	if err := SealFrame(notRoCE); err == nil || string(notRoCE) != string(before) {
		t.Fatalf("SealFrame of an ARP frame: %v, frame changed %v", err, string(notRoCE) != string(before))
	}
}
