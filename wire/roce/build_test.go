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
