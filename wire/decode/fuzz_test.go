package decode

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire"
)

// FuzzRun decodes arbitrary files with every option: never a panic, and the summary always adds
// up (icrc_ok + icrc_bad + malformed = rocev2 <= frames).
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
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, opt := range []Options{{}, {Flows: true, JSON: true}} {
			s, _ := Run(bytes.NewReader(data), io.Discard, opt)
			if s.ICRCOK+s.ICRCBad+s.Malformed != s.RoCEv2 || s.RoCEv2 > s.Frames {
				t.Fatalf("summary does not add up: %+v", s)
			}
		}
	})
}
