package faultplan_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire/faultplan"
	"github.com/softirdma/softirdma/wire/roce"
)

// build makes a RoCEv2 frame from a to b (IPv4, or IPv6 with v6).
func build(t testing.TB, op roce.Opcode, qp, psn uint32, payload int, v6 bool) []byte {
	t.Helper()
	p := roce.Path{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("192.0.2.1"), DstIP: netip.MustParseAddr("192.0.2.2"), SrcPort: 49152, TTL: 64}
	if v6 {
		p.SrcIP, p.DstIP = netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
	}
	b := roce.NewBuilder(p)
	f, err := b.Build(make([]byte, b.FrameLen(op, payload)), &roce.Header{Opcode: op, DestQP: qp, PSN: psn, AckReq: true}, make([]byte, payload))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// ParseFrame reads the BTH behind IPv4 and IPv6 and finds a payload; anything else matches no
// fault.
func TestParseFrame(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		f := build(t, roce.RCWriteMiddle, 0x1234, 77, 256, v6)
		fr := faultplan.ParseFrame(f)
		if !fr.OK || fr.Op != roce.RCWriteMiddle || fr.DestQP != 0x1234 || fr.PSN != 77 || fr.PayloadOff == 0 {
			t.Errorf("v6=%v: %+v", v6, fr)
		}
		if fr := faultplan.ParseFrame(f[:30]); fr.OK {
			t.Errorf("v6=%v: a truncated frame parsed: %+v", v6, fr)
		}
	}
	arp := append(make([]byte, 12), 0x08, 0x06)
	if fr := faultplan.ParseFrame(append(arp, make([]byte, 28)...)); fr.OK {
		t.Errorf("ARP parsed as RoCE: %+v", fr)
	}
	ack := faultplan.ParseFrame(build(t, roce.RCAcknowledge, 5, 9, 0, false))
	if !ack.OK || ack.PayloadOff != 0 {
		t.Errorf("ACK: %+v", ack)
	}
	// Frames that carry an opcode's byte where a BTH would stand but are not RoCEv2: a TCP
	// segment, UDP to another port, a later fragment, a header whose lengths disagree.
	for name, change := range map[string]func(f []byte){
		"tcp":          func(f []byte) { f[14+9] = 6 },
		"udp-4790":     func(f []byte) { f[14+20+3] = 0xb6 },
		"fragment":     func(f []byte) { f[14+6], f[14+7] = 0, 185 },
		"ipv4-options": func(f []byte) { f[14] = 0x46 },
		"udp-length":   func(f []byte) { f[14+20+5]++ },
	} {
		f := build(t, roce.RCReadResponseMiddle, 0x11, 3, 256, false)
		change(f)
		if fr := faultplan.ParseFrame(f); fr.OK {
			t.Errorf("%s: taken for RoCEv2: %+v", name, fr)
		}
	}
}

// Take: a fault that matches a frame counts it seen; it fires (and counts) only where it changes
// the frame's fate or bytes, not on a frame an earlier fault dropped.
func TestTakeFiresOnlyOnWhatItChanges(t *testing.T) {
	f := build(t, roce.RCWriteMiddle, 0x11, 3, 64, false)
	fr := faultplan.ParseFrame(f)
	drop := faultplan.Fault{Action: faultplan.Drop, Nth: 1}
	corrupt := faultplan.Fault{Action: faultplan.Corrupt}
	copies, delay, fired := drop.Take("a", &fr, f, 0, 1, 0)
	if copies != 0 || delay != 0 || !fired || drop.Fired() != 1 || drop.Seen() != 1 {
		t.Fatalf("drop: copies=%d fired=%v (%d of %d)", copies, fired, drop.Fired(), drop.Seen())
	}
	before := slices.Clone(f)
	if copies, _, fired = corrupt.Take("a", &fr, f, 0, copies, delay); copies != 0 || fired || corrupt.Fired() != 0 || corrupt.Seen() != 1 {
		t.Errorf("corrupt after the drop: copies=%d fired=%v (%d of %d)", copies, fired, corrupt.Fired(), corrupt.Seen())
	}
	if !slices.Equal(f, before) {
		t.Error("a fault that did not fire changed the frame")
	}
	if _, _, fired = corrupt.Take("a", &fr, f, 0, 1, 0); !fired || slices.Equal(f, before) {
		t.Error("corrupt on a frame that goes on: not fired, or the frame unchanged")
	}
}

// The syntax: every key, in and back out; each mistake refused with what is wrong.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		spec string
		want faultplan.Fault
		out  string
	}{
		{"drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3",
			faultplan.Fault{Action: faultplan.Drop, Src: "a", Opcodes: []roce.Opcode{roce.RCReadResponseMiddle}, Nth: 3},
			"drop from=a opcode=RC_RDMA_READ_RESPONSE_MIDDLE nth=3"},
		{"duplicate opcode=rc_send_only,ACKNOWLEDGE qp=0x11 count=2 name=dups",
			faultplan.Fault{Action: faultplan.Duplicate, Opcodes: []roce.Opcode{roce.RCSendOnly, roce.RCAcknowledge}, DestQP: 0x11, Count: 2, Name: "dups"},
			"duplicate opcode=RC_SEND_ONLY,RC_ACKNOWLEDGE qp=0x11 count=2 name=dups"},
		{"corrupt from=b psn=0 after=1s for=500ms",
			faultplan.Fault{Action: faultplan.Corrupt, Src: "b", MatchPSN: true, From: time.Second, Until: 1500 * time.Millisecond},
			"corrupt from=b psn=0 after=1s for=500ms"},
		{"delay delay=20ms for=2s", faultplan.Fault{Action: faultplan.Delay, Delay: 20 * time.Millisecond, Until: 2 * time.Second},
			"delay for=2s delay=20ms"},
		{"flap from=a for=30s", faultplan.Fault{Action: faultplan.Flap, Src: "a", Until: 30 * time.Second}, "flap from=a for=30s"},
		// after=0s is the default the syntax documents.
		{"drop from=a after=0s", faultplan.Fault{Action: faultplan.Drop, Src: "a"}, "drop from=a"},
		{"drop after=0 for=1s", faultplan.Fault{Action: faultplan.Drop, Until: time.Second}, "drop for=1s"},
		{"drop name=x1", faultplan.Fault{Action: faultplan.Drop, Name: "x1"}, "drop name=x1"},
		{"drop from=uplink", faultplan.Fault{Action: faultplan.Drop, Src: "uplink"}, "drop from=uplink"},
	} {
		f, err := faultplan.Parse(c.spec)
		if err != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if f.Action != c.want.Action || f.Src != c.want.Src || !slices.Equal(f.Opcodes, c.want.Opcodes) || f.DestQP != c.want.DestQP ||
			f.MatchPSN != c.want.MatchPSN || f.PSN != c.want.PSN || f.Nth != c.want.Nth || f.Count != c.want.Count ||
			f.From != c.want.From || f.Until != c.want.Until || f.Delay != c.want.Delay || f.Name != c.want.Name {
			t.Errorf("%q: %+v, want %+v", c.spec, f, c.want)
		}
		if got := f.Spec(); got != c.out {
			t.Errorf("%q: Spec %q, want %q", c.spec, got, c.out)
		}
		if again, err := faultplan.Parse(f.Spec()); err != nil || again.Spec() != f.Spec() {
			t.Errorf("%q: Spec does not parse back: %v", c.spec, err)
		}
	}
	for _, c := range []struct{ spec, want string }{
		{"", "empty fault"},
		{"explode", "is not an action"},
		{"drop from", "is not KEY=VALUE"},
		{"drop colour=red", `unknown key "colour"`},
		{"drop opcode=RDMA_READ_SIDEWAYS", "is not a RoCE opcode"},
		{"drop qp=0", "a QP number is 1 to 0xffffff"},
		{"drop qp=0x1000000", "a QP number is 1 to 0xffffff"},
		{"drop psn=-1", "a PSN is 0 to 0xffffff"},
		{"drop nth=0", "a count is 1"},
		{"drop nth=1 count=2", "exclude each other"},
		{"drop from=a from=b", "from= given twice"},
		{"drop name=x name=y", "name= given twice"},
		{"drop nth=1 nth=1", "nth= given twice"},
		{"drop name=3", "name=3 reads as a number, which fault remove takes for a fault's number: give a name with a letter, e.g. name=f3"},
		{"drop name=0x10", "name=0x10 reads as a number"},
		{"drop name=-2", "name=-2 reads as a number"},
		{"drop name=99999999999999999999999", "reads as a number"},
		{"drop,from=a,nth=3", "the words of a fault are separated by spaces, not commas: drop from=a nth=3"},
		{"drop from=a,nth=3", "the words of a fault are separated by spaces, not commas: drop from=a nth=3"},
		{"corrupt from=b opcode=RC_SEND_ONLY,count=2", "the words of a fault are separated by spaces, not commas: corrupt from=b opcode=RC_SEND_ONLY count=2"},
		{"drop for=0s", "for=0s: a duration above 0"},
		{"delay delay=0s", "delay=0s: a duration above 0"},
		{"drop after=-1s", "after=-1s: a duration from 0 to 1h0m0s"},
		{"drop for=2h", "at most 1h0m0s"},
		{"delay", "delay needs delay="},
		{"drop delay=5ms", "delay= is for the delay action"},
		{"flap from=a", "flap needs from=FUNCTION and for=DURATION"},
		{"flap for=1s", "flap needs from=FUNCTION and for=DURATION"},
		{"flap from=a for=1s nth=2", "flap takes only"},
	} {
		if _, err := faultplan.Parse(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.spec, err, c.want)
		}
	}
}

// A live plan: the Nth match dropped, a duplicate, a corruption flipping one payload bit, a
// delay, a window that opens after a while, a flap taking a port down both ways; each counted.
func TestLive(t *testing.T) {
	var l faultplan.Live
	add := func(spec string) int {
		f, err := faultplan.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		return l.Add(f)
	}
	drop := add("drop from=a opcode=RC_SEND_ONLY nth=2")
	dup := add("duplicate from=b opcode=ACKNOWLEDGE count=1")
	cor := add("corrupt from=c")
	del := add("delay from=d delay=7ms")
	later := add("drop from=e after=1h")
	send := build(t, roce.RCSendOnly, 1, 1, 64, false)
	for i, want := range []int{1, 0, 1} {
		if n, d := l.Frame("a", send); n != want || d != 0 {
			t.Errorf("a's SEND %d: %d copies after %v, want %d", i+1, n, d, want)
		}
	}
	if n, _ := l.Frame("a", build(t, roce.RCWriteOnly, 1, 1, 64, false)); n != 1 {
		t.Error("a's WRITE was touched")
	}
	ack := build(t, roce.RCAcknowledge, 1, 1, 0, false)
	if n, _ := l.Frame("b", ack); n != 2 {
		t.Errorf("b's first ACK: %d copies, want 2", n)
	}
	if n, _ := l.Frame("b", ack); n != 1 {
		t.Errorf("b's second ACK: %d copies, want 1 (count=1)", n)
	}
	f := build(t, roce.RCSendOnly, 1, 1, 64, false)
	orig := slices.Clone(f)
	if n, _ := l.Frame("c", f); n != 1 {
		t.Error("the corrupted frame was not forwarded")
	}
	diff := 0
	for i := range f {
		if f[i] != orig[i] {
			diff++
		}
	}
	if diff != 1 {
		t.Errorf("corruption changed %d bytes, want 1", diff)
	}
	if _, d := l.Frame("d", send); d != 7*time.Millisecond {
		t.Errorf("d's frame delayed %v", d)
	}
	if n, _ := l.Frame("e", send); n != 1 {
		t.Error("a fault whose window opens in an hour fired")
	}
	flap := add("flap from=f for=1h")
	if n, _ := l.Frame("f", send); n != 0 {
		t.Error("a port whose link is down sent")
	}
	if !l.Down("f") || l.Down("a") {
		t.Error("Down is wrong")
	}
	fired := map[int]int{}
	for _, e := range l.List() {
		fired[e.ID] = e.Fired
	}
	for id, want := range map[int]int{drop: 1, dup: 1, cor: 1, del: 1, later: 0, flap: 2} {
		if fired[id] != want {
			t.Errorf("fault %d fired %d times, want %d", id, fired[id], want)
		}
	}
	if !l.Remove(flap) || l.Remove(flap) || l.Down("f") {
		t.Error("Remove")
	}
}

// Parse takes a line from a control socket: it never panics, and what it accepts writes back
// to a spec it accepts again, the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3", "flap from=a for=30s",
		"delay delay=20ms qp=0x11 psn=5 after=1s for=2s name=x", "corrupt opcode=ACKNOWLEDGE,RC_SEND_ONLY count=3", "drop qp=0x",
		"drop,from=a,nth=3", "drop name=3", "drop after=0s name=x", "flap from=uplink for=1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		ft, err := faultplan.Parse(spec)
		if err != nil {
			return
		}
		again, err := faultplan.Parse(ft.Spec())
		if err != nil || again.Spec() != ft.Spec() {
			t.Fatalf("%q -> %q: %v", spec, ft.Spec(), err)
		}
	})
}
