package decode

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/wire"
)

// FuzzRun decodes arbitrary files with every option: never a panic, and the summary always adds
// up (icrc_ok + icrc_bad + malformed + icrc_unchecked + headers_cut = rocev2, and rocev2 +
// unidentified <= frames). Among the seeds are captures a snap length cut (tcpdump -s).
func FuzzRun(f *testing.F) {
	for _, name := range []string{"rxe-pingpong.pcap", "rxe-perftest-pair.pcap", "cooked-v2.pcap"} {
		data, err := os.ReadFile("../../testdata/pcap/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data[:min(len(data), 1500)])
	}
	// Linux cooked v1 and v2 in pcapng, a few frames each, one cut inside its cooked header.
	frames := cookedFrames(f)[:4]
	var recs [][]byte
	var ts []time.Time
	for _, c := range frames {
		recs, ts = append(recs, c.sll2()), append(ts, c.ts)
	}
	recs[1] = recs[1][:wire.SLL2Len-3]
	f.Add(pcapngOf(uint16(wire.LinkTypeLinuxSLL2), recs, ts))
	f.Add(pcapngOf(uint16(wire.LinkTypeLinuxSLL), recs, ts))
	for _, seed := range snappedSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, opt := range []Options{{}, {Flows: true, JSON: true}} {
			s, _ := Run(bytes.NewReader(data), io.Discard, opt)
			checkSummary(t, s)
		}
	})
}

func checkSummary(t *testing.T, s Summary) {
	t.Helper()
	if s.ICRCOK+s.ICRCBad+s.Malformed+s.ICRCUnchecked+s.HeadersCut != s.RoCEv2 || s.RoCEv2+s.Unidentified > s.Frames {
		t.Fatalf("summary does not add up: %+v", s)
	}
}

// snappedSeeds are captures of every kind of frame (cookedFrames' over Ethernet and Linux cooked
// v2, rxe's UD and CM traffic) cut at snap lengths that end in each layer of headers.
func snappedSeeds(tb testing.TB) [][]byte {
	var eth, sll2 bytes.Buffer
	writeCooked(tb, &eth, wire.LinkTypeEthernet, cookedFrames(tb))
	writeCooked(tb, &sll2, wire.LinkTypeLinuxSLL2, cookedFrames(tb))
	rdmacm, err := os.ReadFile("../../testdata/pcap/rxe-rdmacm.pcap")
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	for _, n := range []int{128, 64, 54} {
		for _, data := range [][]byte{eth.Bytes(), sll2.Bytes()} {
			b, _ := snapped(tb, data, n)
			out = append(out, b)
		}
	}
	b, _ := snapped(tb, rdmacm, 128)
	return append(out, b[:min(len(b), 4000)])
}

// FuzzRunSnapped decodes a capture whole and cut at a snap length, as tcpdump -s would have
// written it, and compares the two frame by frame: a frame the cut analyses has the headers and
// payload length of the whole one, a frame it finds malformed is malformed whole, and every
// RoCEv2 frame of the whole capture has a record in the cut one.
func FuzzRunSnapped(f *testing.F) {
	var eth bytes.Buffer
	writeCooked(f, &eth, wire.LinkTypeEthernet, cookedFrames(f))
	for _, n := range []uint16{128, 64, 54, 50, 40, 20} {
		f.Add(eth.Bytes(), n)
	}
	f.Fuzz(func(t *testing.T, data []byte, n uint16) {
		cut, ok := snappedOf(data, int(n))
		if !ok {
			return
		}
		whole, wsum := jsonRecords(t, data)
		got, sum := jsonRecords(t, cut)
		checkSummary(t, wsum)
		checkSummary(t, sum)
		for frame, w := range whole {
			if got[frame] == nil {
				t.Fatalf("frame %d (%s whole) has no record once cut", frame, w.Status)
			}
		}
		for frame, g := range got {
			w := whole[frame]
			if g.Status == StatusUnidentified {
				continue
			}
			if w == nil {
				t.Fatalf("frame %d is %s cut, not RoCEv2 whole", frame, g.Status)
			}
			switch g.Status {
			case StatusOK, StatusICRCBad:
				if g.Status != w.Status {
					t.Fatalf("frame %d: %s cut, %s whole", frame, g.Status, w.Status)
				}
			case StatusICRCUnchecked:
				if w.Status == StatusMalformed || w.Status == StatusHeadersCut || !sameHeaders(g, w) {
					t.Fatalf("frame %d: analysed cut\n%+v\nwhole\n%+v", frame, g, w)
				}
			case StatusMalformed:
				if w.Status != StatusMalformed {
					t.Fatalf("frame %d: malformed cut (%s), %s whole", frame, g.Error, w.Status)
				}
			}
		}
	})
}

// snappedOf is snapped for arbitrary input: false when the capture cannot be read whole, or holds
// many frames (enough for the fuzzer to explore).
func snappedOf(data []byte, snap int) ([]byte, bool) {
	r, err := wire.NewPcapReader(bytes.NewReader(data))
	if err != nil {
		return nil, false
	}
	var out bytes.Buffer
	w, err := wire.NewPcapWriterLink(&out, r.Link())
	if err != nil {
		return nil, false
	}
	for range 256 {
		b, ci, err := r.Next()
		if err == io.EOF {
			return out.Bytes(), true
		}
		if err != nil {
			return nil, false
		}
		b = b[:min(len(b), snap)]
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: ci.Timestamp, CaptureLength: len(b), Length: max(ci.Length, len(b))}, b); err != nil {
			return nil, false
		}
	}
	return nil, false
}

// jsonRecords decodes a capture with -json and returns its frame records by number.
func jsonRecords(t *testing.T, data []byte) (map[int]*Record, Summary) {
	t.Helper()
	var out bytes.Buffer
	sum, _ := Run(bytes.NewReader(data), &out, Options{JSON: true})
	recs := map[int]*Record{}
	for _, l := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		var r struct {
			Type string `json:"type"`
			Record
		}
		if len(l) == 0 {
			continue
		}
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if r.Type == "frame" {
			recs[r.Frame] = &r.Record
		}
	}
	return recs, sum
}

// sameHeaders says whether two records of a frame show the same headers and payload length: what
// the capture holds beyond the headers (the MAD and CM message, the ICRC) aside.
func sameHeaders(a, b *Record) bool {
	x, y := *a, *b
	for _, r := range []*Record{&x, &y} {
		r.CapLen, r.Status, r.Error, r.ICRC, r.ICRCCarried, r.ICRCComputed, r.MAD, r.CM = 0, "", "", "", "", "", nil, nil
	}
	jx, _ := json.Marshal(x)
	jy, _ := json.Marshal(y)
	return bytes.Equal(jx, jy)
}
