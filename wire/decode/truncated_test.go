package decode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/wire"
)

const capturesDir = "../../testdata/pcap/"

// snapped rewrites a capture as tcpdump -s snap would have written it: every record cut to its
// first snap bytes, its length on the wire kept. It also returns each record's length on the
// wire, by frame number (from 1).
func snapped(t testing.TB, data []byte, snap int) ([]byte, []int) {
	t.Helper()
	r, err := wire.NewPcapReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w, err := wire.NewPcapWriterLink(&out, r.Link())
	if err != nil {
		t.Fatal(err)
	}
	lens := []int{0}
	for {
		b, ci, err := r.Next()
		if err == io.EOF {
			return out.Bytes(), lens
		}
		if err != nil {
			t.Fatal(err)
		}
		lens = append(lens, ci.Length)
		b = b[:min(len(b), snap)]
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: ci.Timestamp, CaptureLength: len(b), Length: ci.Length}, b); err != nil {
			t.Fatal(err)
		}
	}
}

func readCapture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(capturesDir + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

var frameNumber = regexp.MustCompile(`^\S+ #(\d+) `)

// TestDecodeHeaderOnlyCapture: a capture of each frame's first 128 bytes (tcpdump -s 128) holds
// every header: its report is the whole capture's, frame for frame, flow for flow, but for the
// ICRC of the frames it cut, which it says it could not check, and counts apart.
func TestDecodeHeaderOnlyCapture(t *testing.T) {
	for _, name := range []string{"rxe-perftest-pair.pcap", "rxe-pingpong.pcap", "cooked-v2.pcap", "rxe-rdmacm.pcap"} {
		data := readCapture(t, name)
		cut, lens := snapped(t, data, 128)
		opt := Options{Flows: true}
		want, wsum, err := runText(t, data, opt)
		if err != nil || !wsum.Clean() {
			t.Fatalf("%s whole: %v %+v", name, err, wsum)
		}
		got, sum, err := runText(t, cut, opt)
		if err != nil || !sum.Clean() {
			t.Errorf("%s -s 128: %v %+v", name, err, sum)
		}
		wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
		if len(wl) != len(gl) && name != "rxe-rdmacm.pcap" {
			t.Fatalf("%s: %d lines, whole %d:\n%s", name, len(gl), len(wl), got)
		}
		unchecked := 0
		for i, w := range wl[:len(wl)-2] {
			if strings.HasPrefix(w, "flows: ") && strings.HasSuffix(w, " CM exchanges") {
				// The CM messages are the MADs' data, beyond the 128 bytes: the MAD headers
				// are counted on the UD flows, the exchanges cannot be followed.
				break
			}
			m := frameNumber.FindStringSubmatch(w)
			if m != nil {
				var n int
				fmt.Sscan(m[1], &n)
				if lens[n] > 128 {
					unchecked++
					w = strings.TrimSuffix(w, " icrc=ok") + fmt.Sprintf(" icrc=n/a (truncated to 128 of %d bytes)", lens[n])
					if name == "rxe-rdmacm.pcap" {
						// Past the MAD header: the CM fields are not in the capture.
						w = regexp.MustCompile(` cm=.* payload=`).ReplaceAllString(w, " payload=")
					}
				}
			}
			if gl[i] != w {
				t.Errorf("%s line %d:\n%s\nwant\n%s", name, i+1, gl[i], w)
			}
		}
		wantSum := wsum
		wantSum.ICRCOK -= unchecked
		wantSum.ICRCUnchecked = unchecked
		if sum != wantSum || unchecked == 0 {
			t.Errorf("%s: summary %+v, want %+v", name, sum, wantSum)
		}
		line := strings.Replace(wl[len(wl)-2], fmt.Sprintf(" icrc_ok=%d ", wsum.ICRCOK), fmt.Sprintf(" icrc_ok=%d ", wantSum.ICRCOK), 1)
		if line += fmt.Sprintf(" icrc_unchecked=%d headers_cut=0 unidentified=0", unchecked); gl[len(gl)-2] != line {
			t.Errorf("%s: summary line %q, want %q", name, gl[len(gl)-2], line)
		}
	}
	// One of each, pinned.
	got, sum, _ := runText(t, must(snapped(t, readCapture(t, "rxe-perftest-pair.pcap"), 128)), Options{})
	for _, want := range []string{
		"2026-11-29T10:09:36.583859Z #39 192.168.77.3 -> 192.168.77.2 sport=49441 RC_RDMA_WRITE_FIRST qp=0x000011 psn=6960847 va=0x55aa6c626000 rkey=0x000002a6 len=2048 payload=1024 icrc=n/a (truncated to 128 of 1098 bytes)\n",
		" RC_ACKNOWLEDGE qp=0x000011 psn=6960848 aeth=ACK(credits=31) msn=1 payload=0 icrc=ok\n",
		" UD_SEND_ONLY qp=0x000015 psn=5120568 qkey=0x11111111 src_qp=0x000015 payload=512 icrc=n/a (truncated to 128 of 578 bytes)\n",
		"\nsummary: frames=241 rocev2=61 icrc_ok=25 icrc_bad=0 malformed=0 icrc_unchecked=36 headers_cut=0 unidentified=0\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	if sum != (Summary{Frames: 241, RoCEv2: 61, ICRCOK: 25, ICRCUnchecked: 36}) {
		t.Errorf("summary %+v", sum)
	}
}

func must(b []byte, _ []int) []byte { return b }

// TestDecodeCutInsideHeaders: captures cut shorter than the headers (tcpdump -s 64, -s 54). Over
// IPv4 and Ethernet the BTH ends at byte 54: frames whose extension headers are cut are not
// analysed, and say inside which header the capture ends; the others are. Over Linux cooked v2
// the IPv6 frames' UDP header ends at byte 68: cut before it, nothing tells whether they are
// RoCEv2 at all.
func TestDecodeCutInsideHeaders(t *testing.T) {
	perftest, cooked := readCapture(t, "rxe-perftest-pair.pcap"), readCapture(t, "cooked-v2.pcap")
	for _, c := range []struct {
		name  string
		data  []byte
		snap  int
		sum   Summary
		lines []string
	}{
		{"perftest -s 64", perftest, 64, Summary{Frames: 241, RoCEv2: 61, ICRCOK: 10, ICRCUnchecked: 31, HeadersCut: 20}, []string{
			"2026-11-29T10:09:36.583859Z #39 192.168.77.3 -> 192.168.77.2 sport=49441 RC_RDMA_WRITE_FIRST qp=0x000011 psn=6960847 not analysed: the capture ends inside the RETH (64 of 1098 bytes)\n",
			" #40 192.168.77.3 -> 192.168.77.2 sport=49441 RC_RDMA_WRITE_LAST qp=0x000011 psn=6960848 ackreq payload=1024 icrc=n/a (truncated to 64 of 1082 bytes)\n",
			" RC_ACKNOWLEDGE qp=0x000011 psn=6960848 aeth=ACK(credits=31) msn=1 payload=0 icrc=ok\n",
			" RC_RDMA_READ_RESPONSE_FIRST qp=0x000012 psn=15338670 aeth=ACK(credits=31) msn=1 payload=1024 icrc=n/a (truncated to 64 of 1086 bytes)\n",
			" RC_ATOMIC_ACKNOWLEDGE qp=0x000013 psn=155320 aeth=ACK(credits=31) msn=4 not analysed: the capture ends inside the AtomicAckETH (64 of 70 bytes)\n",
			" UD_SEND_ONLY qp=0x000015 psn=5120568 qkey=0x11111111 src_qp=0x000015 payload=512 icrc=n/a (truncated to 64 of 578 bytes)\n",
			"\nsummary: frames=241 rocev2=61 icrc_ok=10 icrc_bad=0 malformed=0 icrc_unchecked=31 headers_cut=20 unidentified=0\n",
		}},
		{"perftest -s 54", perftest, 54, Summary{Frames: 241, RoCEv2: 61, ICRCUnchecked: 15, HeadersCut: 46}, []string{
			" RC_RDMA_WRITE_FIRST qp=0x000011 psn=6960847 not analysed: the capture ends inside the RETH (54 of 1098 bytes)\n",
			" RC_RDMA_WRITE_LAST qp=0x000011 psn=6960848 ackreq payload=1024 icrc=n/a (truncated to 54 of 1082 bytes)\n",
			" RC_ACKNOWLEDGE qp=0x000011 psn=6960848 not analysed: the capture ends inside the AETH (54 of 62 bytes)\n",
			" UD_SEND_ONLY qp=0x000015 psn=5120568 not analysed: the capture ends inside the DETH (54 of 578 bytes)\n",
			"\nsummary: frames=241 rocev2=61 icrc_ok=0 icrc_bad=0 malformed=0 icrc_unchecked=15 headers_cut=46 unidentified=0\n",
		}},
		{"cooked v2 -s 64", cooked, 64, Summary{Frames: 12, RoCEv2: 9, ICRCUnchecked: 3, HeadersCut: 6, Unidentified: 2}, []string{
			"2026-11-30T09:00:00.001125Z #2 10.0.7.1 -> 10.0.7.2 sport=49458 RC_RDMA_WRITE_FIRST qp=0x000012 psn=1000 not analysed: the capture ends inside the RETH (64 of 336 bytes)\n",
			" #3 10.0.7.1 -> 10.0.7.2 sport=49458 RC_RDMA_WRITE_LAST qp=0x000012 psn=1001 ackreq payload=256 icrc=n/a (truncated to 64 of 320 bytes)\n",
			" #11 fd00:7::1 -> fd00:7::2 not analysed: the capture ends inside the UDP header (64 of 120 bytes): cannot tell whether it is RoCEv2\n",
			" #4 10.0.7.2 -> 10.0.7.1 sport=49458 RC_ACKNOWLEDGE qp=0x000011 psn=1001 aeth=ACK(credits=31) msn=1 payload=0 icrc=n/a (truncated to 64 of 68 bytes)\n",
			"\nsummary: frames=12 rocev2=9 icrc_ok=0 icrc_bad=0 malformed=0 icrc_unchecked=3 headers_cut=6 unidentified=2\n",
		}},
		{"cooked v2 -s 54", cooked, 54, Summary{Frames: 12, RoCEv2: 9, HeadersCut: 9, Unidentified: 2}, []string{
			" #2 10.0.7.1 -> 10.0.7.2 sport=49458 not analysed: the capture ends inside the BTH (54 of 336 bytes)\n",
			" #11 not analysed: the capture ends inside the IPv6 header (54 of 120 bytes): cannot tell whether it is RoCEv2\n",
			"\nsummary: frames=12 rocev2=9 icrc_ok=0 icrc_bad=0 malformed=0 icrc_unchecked=0 headers_cut=9 unidentified=2\n",
		}},
	} {
		cut, _ := snapped(t, c.data, c.snap)
		got, sum, err := runText(t, cut, Options{Flows: true})
		if err != nil || sum != c.sum || sum.Clean() {
			t.Errorf("%s: %v %+v, want %+v (not clean)", c.name, err, sum, c.sum)
		}
		for _, want := range c.lines {
			if !strings.Contains(got, want) {
				t.Errorf("%s: no %q in\n%s", c.name, want, got)
			}
		}
		// JSON: the same verdicts, the header the capture ends in named on its own.
		js, _, _ := runText(t, cut, Options{Flows: true, JSON: true})
		statuses := map[string]int{}
		for _, l := range strings.Split(strings.TrimSpace(js), "\n") {
			var v struct {
				Type, Status, Cut, ICRC string
				CapLen                  int `json:"caplen"`
			}
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("%s: %q: %v", c.name, l, err)
			}
			if v.Type != "frame" {
				continue
			}
			statuses[v.Status]++
			if (v.Cut != "") != (v.Status == StatusHeadersCut || v.Status == StatusUnidentified) || (v.ICRC == "n/a") != (v.Status == StatusICRCUnchecked) {
				t.Errorf("%s: %s", c.name, l)
			}
		}
		if statuses[StatusOK] != c.sum.ICRCOK || statuses[StatusICRCUnchecked] != c.sum.ICRCUnchecked ||
			statuses[StatusHeadersCut] != c.sum.HeadersCut || statuses[StatusUnidentified] != c.sum.Unidentified {
			t.Errorf("%s: JSON statuses %v", c.name, statuses)
		}
	}
}

// TestDecodeHeaderOnlyFlows: from a header-only capture the flows are those of the whole one:
// PSN gaps and retransmissions, NAKs, the rkeys used, and the path MTU learned from the payload
// lengths on the wire (which tells how many PSNs a READ takes), not from the bytes captured.
func TestDecodeHeaderOnlyFlows(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	ab := wire.NewBuilder(wire.Path{SrcIP: a, DstIP: b, SrcPort: 50001})
	ba := wire.NewBuilder(wire.Path{SrcIP: b, DstIP: a, SrcPort: 50001})
	var whole bytes.Buffer
	w := newCaptureWriter(t, &whole, time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), time.Millisecond)
	send := func(fromA bool, h wire.Header, payload int) {
		bl := ba
		h.DestQP = 0x11
		if fromA {
			bl, h.DestQP = ab, 0x22
		}
		fr, err := bl.Build(make([]byte, 2048), &h, make([]byte, payload))
		if err != nil {
			t.Fatal(err)
		}
		w.add(fr)
	}
	ack := func(psn, msn uint32, s wire.Syndrome) {
		send(false, wire.Header{Opcode: wire.RCAcknowledge, PSN: psn, Syndrome: s, MSN: msn}, 0)
	}
	send(true, wire.Header{Opcode: wire.RCWriteFirst, PSN: 100, VA: 0x1000, RKey: 0x2a6, DMALen: 600}, 256)
	send(true, wire.Header{Opcode: wire.RCWriteMiddle, PSN: 101}, 256)
	send(true, wire.Header{Opcode: wire.RCWriteLast, PSN: 102, AckReq: true}, 88)
	ack(102, 1, wire.ACKUnlimited)
	send(true, wire.Header{Opcode: wire.RCSendOnly, PSN: 104, AckReq: true}, 200) // 103 lost
	ack(102, 1, wire.NAKPSNSeqError)
	send(true, wire.Header{Opcode: wire.RCSendOnly, PSN: 103}, 200)
	send(true, wire.Header{Opcode: wire.RCSendOnly, PSN: 104, AckReq: true}, 200)
	ack(104, 3, wire.ACKUnlimited)
	// A READ of 600 bytes takes three PSNs at the 256-byte MTU: the next request is 108.
	send(true, wire.Header{Opcode: wire.RCReadRequest, PSN: 105, AckReq: true, VA: 0x2000, RKey: 0x3fe, DMALen: 600}, 0)
	send(false, wire.Header{Opcode: wire.RCReadResponseFirst, PSN: 105, Syndrome: wire.ACKUnlimited, MSN: 4}, 256)
	send(false, wire.Header{Opcode: wire.RCReadResponseMiddle, PSN: 106}, 256)
	send(false, wire.Header{Opcode: wire.RCReadResponseLast, PSN: 107, Syndrome: wire.ACKUnlimited, MSN: 4}, 88)
	send(true, wire.Header{Opcode: wire.RCSendOnly, PSN: 108, AckReq: true}, 200)
	ack(108, 5, wire.ACKUnlimited)

	flows := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "conn ") || strings.HasPrefix(l, "  ") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	want, wsum, _ := runText(t, whole.Bytes(), Options{Flows: true})
	got, sum, _ := runText(t, must(snapped(t, whole.Bytes(), 96)), Options{Flows: true})
	f := flows(want)
	for _, s := range []string{"retransmits=2 gaps=1 missing_psns=1", "NAK_PSN_SEQ_ERR=1", "rkey 0x000002a6 uses=1 ops=WRITE", "rkey 0x000003fe uses=1 ops=READ", "psn=100..108"} {
		if !strings.Contains(f, s) {
			t.Errorf("whole capture: no %q in\n%s", s, f)
		}
	}
	if flows(got) != f {
		t.Errorf("flows from 96 bytes:\n%s\nwant\n%s", flows(got), f)
	}
	if sum.ICRCUnchecked != 10 || sum.ICRCOK != wsum.ICRCOK-10 || !sum.Clean() {
		t.Errorf("summary %+v (whole %+v)", sum, wsum)
	}
}

// TestDecodeCutInIPOptions: a raw IPv4 capture cut inside the header's options still shows the
// addresses, which come before them.
func TestDecodeCutInIPOptions(t *testing.T) {
	b := wire.NewBuilder(wire.Path{SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"), SrcPort: 50001})
	fr, err := b.Build(make([]byte, 2048), &wire.Header{Opcode: wire.RCSendOnly, DestQP: 0x11, PSN: 1}, make([]byte, 64))
	if err != nil {
		t.Fatal(err)
	}
	ip := fr[wire.EthernetLen:]
	opt := append(append(append([]byte(nil), ip[:wire.IPv4Len]...), 1, 1, 1, 0), ip[wire.IPv4Len:]...) // NOP NOP NOP EOL
	opt[0] = 0x46
	opt[3] += 4
	var out bytes.Buffer
	w, err := wire.NewPcapWriterLink(&out, wire.LinkTypeIPv4)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(0, 0), CaptureLength: 22, Length: len(opt)}, opt[:22]); err != nil {
		t.Fatal(err)
	}
	got, sum, _ := runText(t, out.Bytes(), Options{})
	want := "1970-01-01T00:00:00.000000Z #1 10.0.0.1 -> 10.0.0.2 not analysed: the capture ends inside the IPv4 header (22 of 112 bytes): cannot tell whether it is RoCEv2\n"
	if !strings.HasPrefix(got, want) || sum != (Summary{Frames: 1, Unidentified: 1}) {
		t.Errorf("%q %+v, want %q", got, sum, want)
	}
}
