package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/softirdma/softirdma/wire"
)

const captures = "../../testdata/pcap/"

func runDecodeArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = runDecode(args, &o, &e)
	return code, o.String(), e.String()
}

// decodeClean runs decode with args, which must exit 0 with nothing on stderr, and returns its
// output.
func decodeClean(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := runDecodeArgs(t, args...)
	if code != 0 || errs != "" {
		t.Errorf("decode %q: exit %d, stderr %q", args, code, errs)
	}
	return out
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// wantOutput checks that out ends with the line summary (unless it is empty) and holds each of
// lines.
func wantOutput(t *testing.T, out, summary string, lines ...string) {
	t.Helper()
	if got := lastLine(out); summary != "" && got != summary {
		t.Errorf("last line %q, want %q", got, summary)
	}
	for _, want := range lines {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

type packet struct {
	ci   gopacket.CaptureInfo
	data []byte
}

func readPackets(t *testing.T, name string) []packet {
	t.Helper()
	f, err := os.Open(name)
	var r *wire.PcapReader
	if err == nil {
		defer f.Close()
		r, err = wire.NewPcapReader(f)
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []packet
	for {
		data, ci, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, packet{ci, append([]byte(nil), data...)})
	}
}

func writePcap(t *testing.T, link layers.LinkType, ps []packet) string {
	t.Helper()
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	if err := w.WriteFileHeader(wire.MaxSnaplen, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := w.WritePacket(p.ci, p.data); err != nil {
			t.Fatal(err)
		}
	}
	return writeFile(t, b.Bytes())
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "capture")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestDecodeCaptures(t *testing.T) {
	for name, summary := range map[string]string{
		"rxe-pingpong.pcap":      "summary: frames=112 rocev2=112 icrc_ok=112 icrc_bad=0 malformed=0",
		"rxe-perftest-pair.pcap": "summary: frames=241 rocev2=61 icrc_ok=61 icrc_bad=0 malformed=0",
	} {
		out := decodeClean(t, captures+name)
		if got := lastLine(out); got != summary {
			t.Errorf("%s: last line %q, want %q", name, got, summary)
		}
		if n := strings.Count(out, " icrc=ok\n"); n != strings.Count(out, "\n")-1 {
			t.Errorf("%s: %d icrc=ok lines of %d", name, n, strings.Count(out, "\n")-1)
		}
	}
}

// TestDecodeLine pins the text of one frame of each kind of header.
func TestDecodeLine(t *testing.T) {
	_, out, _ := runDecodeArgs(t, captures+"rxe-perftest-pair.pcap")
	wantOutput(t, out, "",
		"2026-11-29T10:09:36.583859Z #39 192.168.77.3 -> 192.168.77.2 sport=49441 RC_RDMA_WRITE_FIRST qp=0x000011 psn=6960847 va=0x55aa6c626000 rkey=0x000002a6 len=2048 payload=1024 icrc=ok\n",
		" RC_ACKNOWLEDGE qp=0x000011 psn=6960848 aeth=ACK(credits=31) msn=1 payload=0 icrc=ok",
		" RC_RDMA_READ_REQUEST qp=0x000012 psn=15338670 ackreq va=0x",
		" RC_ATOMIC_ACKNOWLEDGE qp=0x000013 psn=155320 aeth=ACK(credits=31) msn=4 orig=0xb0b317f16f72e14c payload=0 icrc=ok",
		" UD_SEND_ONLY qp=0x000015 psn=5120568 qkey=0x11111111 src_qp=0x000015 payload=512 icrc=ok",
	)
	if !regexp.MustCompile(`RC_FETCH_ADD qp=0x000013 psn=\d+ ackreq va=0x[0-9a-f]+ rkey=0x0000046c add=0x1 payload=0 icrc=ok`).MatchString(out) {
		t.Error("no FETCH_ADD line")
	}
}

func TestDecodeFlagsAnywhere(t *testing.T) {
	file := captures + "rxe-perftest-pair.pcap"
	_, before, _ := runDecodeArgs(t, "-flows", "-json", file)
	_, after, _ := runDecodeArgs(t, file, "-json", "-flows")
	_, mixed, _ := runDecodeArgs(t, "-json", file, "--flows")
	if before != after || before != mixed || !strings.Contains(before, `"type":"flow"`) {
		t.Error("flags before, after and around FILE give different output")
	}
	if code, _, _ := runDecodeArgs(t, file, "-nope"); code != 2 {
		t.Errorf("bad flag: exit %d", code)
	}
	if code, _, _ := runDecodeArgs(t); code != 2 {
		t.Errorf("no file: exit %d", code)
	}
	if code, _, _ := runDecodeArgs(t, file, file); code != 2 {
		t.Errorf("two files: exit %d", code)
	}
	if code, _, errs := runDecodeArgs(t, "-h"); code != 0 || !strings.Contains(errs, "usage: softirdma decode") {
		t.Errorf("-h: exit %d, %q", code, errs)
	}
}

func TestDecodeJSON(t *testing.T) {
	code, out, _ := runDecodeArgs(t, "-json", "-flows", captures+"rxe-perftest-pair.pcap")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	types := map[string]int{}
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		types[v["type"].(string)]++
	}
	if types["frame"] != 61 || types["flow"] != 4 || types["summary"] != 1 {
		t.Errorf("objects %v", types)
	}
	var sum struct {
		Type                                       string
		Frames, RoCEv2, ICRCOK, ICRCBad, Malformed int
	}
	last := lastLine(out)
	last = strings.NewReplacer(`"rocev2"`, `"RoCEv2"`, `"icrc_ok"`, `"ICRCOK"`, `"icrc_bad"`, `"ICRCBad"`).Replace(last)
	if err := json.Unmarshal([]byte(last), &sum); err != nil || sum.Type != "summary" || sum.Frames != 241 || sum.RoCEv2 != 61 || sum.ICRCOK != 61 {
		t.Errorf("summary %+v (%v)", sum, err)
	}
}

// TestDecodeBadFrames: a flipped payload bit is icrc_bad, a UDP length that disagrees with the IP
// one is malformed, and either makes the exit status 1. A frame the capture cut after its headers
// is analysed with its ICRC unchecked; one cut inside its headers says which and is not analysed.
func TestDecodeBadFrames(t *testing.T) {
	ps := readPackets(t, captures+"rxe-pingpong.pcap")
	ps[0].data[60] ^= 0x10 // payload of the first SEND_ONLY
	ps[1].data[19] ^= 0x01 // IPv4 identification: covered by the ICRC
	ps[2].data = ps[2].data[:70]
	ps[2].ci.CaptureLength = 70 // cut by a snap length: Length stays
	ps[3].data[15] ^= 0xFF      // TOS: masked, still fine
	ps[4].data = ps[4].data[:50]
	ps[4].ci.CaptureLength = 50
	ps[5].data[14+20+5]++ // UDP length
	code, out, _ := runDecodeArgs(t, writePcap(t, layers.LinkTypeEthernet, ps))
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantOutput(t, out, "summary: frames=112 rocev2=112 icrc_ok=107 icrc_bad=2 malformed=1 icrc_unchecked=1 headers_cut=1 unidentified=0",
		"#1 192.168.77.2 -> 192.168.77.1 sport=54099 RC_SEND_ONLY qp=0x000123 psn=3753198 ackreq payload=64 icrc=bad(carried 0xdfd48238 computed 0xa8826e8e)\n",
		"#3 192.168.77.2 -> 192.168.77.1 sport=54099 RC_SEND_ONLY qp=0x000123 psn=3753199 ackreq payload=64 icrc=n/a (truncated to 70 of 122 bytes)\n",
		"#5 192.168.77.2 -> 192.168.77.1 sport=54099 not analysed: the capture ends inside the BTH (50 of 122 bytes)\n",
		"#6 192.168.77.2 -> 192.168.77.1 sport=54099 RC_ACKNOWLEDGE qp=0x000123 psn=43983 malformed: wire: bad UDP length: differs from the IP payload length\n",
	)
}

func TestDecodeFormats(t *testing.T) {
	ps := readPackets(t, captures+"rxe-perftest-pair.pcap")
	_, want, _ := runDecodeArgs(t, captures+"rxe-perftest-pair.pcap")

	// pcapng, through pcapgo's writer.
	var b bytes.Buffer
	w, err := wire.NewPcapngWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := w.WritePacket(p.ci, p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if code, got, errs := runDecodeArgs(t, writeFile(t, b.Bytes())); code != 0 || got != want {
		t.Errorf("pcapng: exit %d %s, output differs", code, errs)
	}

	// Raw IP: the same frames without their Ethernet headers.
	var raw []packet
	for _, p := range ps {
		ci := p.ci
		ci.CaptureLength -= 14
		ci.Length -= 14
		raw = append(raw, packet{ci, p.data[14:]})
	}
	// Linux cooked capture (tcpdump -i any): a 16-byte header ending in the EtherType.
	var sll []packet
	for _, p := range ps {
		h := make([]byte, 16, 16+len(p.data))
		h[1], h[5] = 4, 6 // sent by us; hardware address length
		copy(h[6:12], p.data[6:12])
		copy(h[14:16], p.data[12:14])
		ci := p.ci
		ci.CaptureLength += 2
		ci.Length += 2
		sll = append(sll, packet{ci, append(h, p.data[14:]...)})
	}
	for name, file := range map[string]string{
		"raw":    writePcap(t, layers.LinkTypeRaw, raw),
		"ipv4":   writePcap(t, layers.LinkTypeIPv4, raw),
		"cooked": writePcap(t, layers.LinkTypeLinuxSLL, sll),
	} {
		// ARP frames are not IP: they are counted as frames but are not RoCE either way, and the
		// frame lines do not show the link layer, so the whole report is the same.
		code, got, errs := runDecodeArgs(t, file)
		if code != 0 || got != want {
			t.Errorf("%s: exit %d %s: %q", name, code, errs, lastLine(got))
		}
	}
}

func TestDecodeUnreadable(t *testing.T) {
	data, err := os.ReadFile(captures + "rxe-pingpong.pcap")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		data []byte
		code int
	}{
		"empty":       {nil, 2},
		"garbage":     {bytes.Repeat([]byte("not a capture "), 10), 2},
		"header only": {data[:24], 0},
		"cut record":  {data[:len(data)/2], 2},
		"cut header":  {data[:10], 2},
	} {
		code, out, errs := runDecodeArgs(t, writeFile(t, c.data))
		if code != c.code {
			t.Errorf("%s: exit %d, want %d (%s)", name, code, c.code, errs)
		}
		if c.code == 2 && errs == "" {
			t.Errorf("%s: no error message", name)
		}
		if name == "cut record" && !strings.HasPrefix(lastLine(out), "summary: frames=") {
			t.Errorf("cut record: no summary of what was read")
		}
	}
	if code, _, _ := runDecodeArgs(t, filepath.Join(t.TempDir(), "missing.pcap")); code != 2 {
		t.Errorf("missing file: exit %d", code)
	}
	// A link type the decoder does not know.
	if code, _, errs := runDecodeArgs(t, writePcap(t, layers.LinkTypeIEEE802_11, nil)); code != 2 || !strings.Contains(errs, "link type") {
		t.Errorf("802.11: exit %d %q", code, errs)
	}
}

// TestDecodeStdin: FILE "-" is standard input, which need not be a file that can be opened by
// name (a pipe from tcpdump -w -).
func TestDecodeStdin(t *testing.T) {
	file := captures + "rxe-perftest-pair.pcap"
	_, want, _ := runDecodeArgs(t, "-flows", file)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.Write(data)
		w.Close()
	}()
	defer r.Close()
	saved := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = saved }()
	code, got, errs := runDecodeArgs(t, "-flows", "-")
	if code != 0 || errs != "" || got != want {
		t.Errorf("decode -flows -: exit %d, stderr %q, output differs from the file's: %t", code, errs, got != want)
	}

	// A garbled stream is named as standard input in the message.
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w2.Write([]byte("not a capture at all"))
		w2.Close()
	}()
	defer r2.Close()
	os.Stdin = r2
	if code, _, errs := runDecodeArgs(t, "-"); code != 2 || !strings.HasPrefix(errs, "softirdma decode: standard input: ") {
		t.Errorf("garbage on stdin: exit %d, %q", code, errs)
	}
}

// TestDecodeCookedV2: a capture of tcpdump -i any since libpcap 1.10 is Linux cooked v2 (link
// type 276); 64-bit values show in full.
func TestDecodeCookedV2(t *testing.T) {
	out := decodeClean(t, "-flows", captures+"cooked-v2.pcap")
	wantOutput(t, out, "summary: frames=12 rocev2=11 icrc_ok=11 icrc_bad=0 malformed=0",
		"#5 10.0.7.1 -> 10.0.7.2 sport=49458 RC_COMPARE_SWAP qp=0x000012 psn=1002 ackreq va=0x7ffffffffffffff8 rkey=0x000002a7 swap=0xfedcba9876543210 compare=0x123456789abcdef payload=0 icrc=ok\n",
		"#11 fd00:7::1 -> fd00:7::2 sport=49458 RC_SEND_ONLY_WITH_IMMEDIATE qp=0x000012 psn=77 ackreq imm=0xdeadbeef payload=32 icrc=ok\n",
		"flows: 2 RC connections\n",
	)
	// A link type the decoder does not read is named by its number.
	name := writePcap(t, 147, nil)
	want := "softirdma decode: " + name + ": unreadable capture: link type 147 is not one the decoder reads (Ethernet, raw IP, Linux cooked v1 or v2)\n"
	if code, _, errs := runDecodeArgs(t, name); code != 2 || errs != want {
		t.Errorf("link type 147: exit %d\n%q, want\n%q", code, errs, want)
	}
}

// TestDecodeJSON64: addresses and atomic operands above 2^53 survive a JSON reader that turns
// numbers into float64 (jq, JavaScript): they are hex strings; 32-bit fields stay numbers.
func TestDecodeJSON64(t *testing.T) {
	code, out, _ := runDecodeArgs(t, "-json", captures+"cooked-v2.pcap")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	want := map[string]map[string]string{ // opcode -> field -> value
		"RC_RDMA_WRITE_FIRST":   {"reth.va": "0xffff800012345000"},
		"RC_COMPARE_SWAP":       {"atomic_eth.va": "0x7ffffffffffffff8", "atomic_eth.swap_add": "0xfedcba9876543210", "atomic_eth.compare": "0x123456789abcdef"},
		"RC_FETCH_ADD":          {"atomic_eth.va": "0x20000000000008", "atomic_eth.swap_add": "0x20000000000001"},
		"RC_RDMA_READ_REQUEST":  {"reth.va": "0xffff800012345000"},
		"RC_ATOMIC_ACKNOWLEDGE": {"atomic_orig": ""}, // two of them: checked below
	}
	origs := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		op, _ := v["opcode"].(string)
		for path, w := range want[op] {
			var got any = v
			for _, k := range strings.Split(path, ".") {
				got = got.(map[string]any)[k]
			}
			s, ok := got.(string)
			if !ok {
				t.Errorf("%s %s: %T %v, want a string", op, path, got, got)
				continue
			}
			if path == "atomic_orig" {
				origs[s] = true
			} else if s != w {
				t.Errorf("%s %s = %q, want %q", op, path, s, w)
			}
		}
		if r, ok := v["reth"].(map[string]any); ok {
			if _, ok := r["rkey"].(float64); !ok {
				t.Errorf("%s reth.rkey is %T, want a number", op, r["rkey"])
			}
		}
	}
	if !origs["0x123456789abcdef"] || !origs["0xfedcba9876543211"] || len(origs) != 2 {
		t.Errorf("atomic_orig values %v", origs)
	}
}

// snap cuts every record of the capture to its first n bytes, as tcpdump -s n writes it.
func snap(ps []packet, n int) []packet {
	out := make([]packet, len(ps))
	for i, p := range ps {
		out[i] = p
		if len(p.data) > n {
			out[i].data = p.data[:n]
			out[i].ci.CaptureLength = n
		}
	}
	return out
}

// TestDecodeHeaderOnlyCapture: tcpdump -s 128, the usual way to capture RDMA, keeps every header:
// the frames are analysed, flows included, their ICRC reported as not checkable, and the exit
// status is 0. Cut inside the headers (-s 64, -s 54 over IPv4), the frames that lose a header
// say which, and the exit status is 1.
func TestDecodeHeaderOnlyCapture(t *testing.T) {
	ps := readPackets(t, captures+"rxe-perftest-pair.pcap")
	out := decodeClean(t, "-flows", writePcap(t, layers.LinkTypeEthernet, snap(ps, 128)))
	wantOutput(t, out, "summary: frames=241 rocev2=61 icrc_ok=25 icrc_bad=0 malformed=0 icrc_unchecked=36 headers_cut=0 unidentified=0",
		"#39 192.168.77.3 -> 192.168.77.2 sport=49441 RC_RDMA_WRITE_FIRST qp=0x000011 psn=6960847 va=0x55aa6c626000 rkey=0x000002a6 len=2048 payload=1024 icrc=n/a (truncated to 128 of 1098 bytes)\n",
		"flows: 4 RC connections\n",
		"  192.168.77.3 -> 192.168.77.2 qp=0x000011 sport=49441: packets=10 bytes=10900 requests=10 responses=0 messages=5 psn=6960847..6960856 retransmits=0 gaps=0 missing_psns=0",
		"    rkey 0x000003fe uses=5 ops=READ ",
	)
	code, out, _ := runDecodeArgs(t, writePcap(t, layers.LinkTypeEthernet, snap(ps, 64)))
	if code != 1 || !strings.Contains(out, "#39 192.168.77.3 -> 192.168.77.2 sport=49441 RC_RDMA_WRITE_FIRST qp=0x000011 psn=6960847 not analysed: the capture ends inside the RETH (64 of 1098 bytes)\n") {
		t.Errorf("-s 64: exit %d\n%s", code, out)
	}
	code, out, _ = runDecodeArgs(t, writePcap(t, layers.LinkTypeEthernet, snap(ps, 54)))
	if got, want := lastLine(out), "summary: frames=241 rocev2=61 icrc_ok=0 icrc_bad=0 malformed=0 icrc_unchecked=15 headers_cut=46 unidentified=0"; code != 1 || got != want {
		t.Errorf("-s 54: exit %d, %q, want %q", code, got, want)
	}
}
