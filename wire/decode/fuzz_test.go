package decode

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// FuzzRun decodes arbitrary files with every option: never a panic, and the summary always adds
// up (icrc_ok + icrc_bad + malformed = rocev2 <= frames).
func FuzzRun(f *testing.F) {
	for _, name := range []string{"rxe-pingpong.pcap", "rxe-perftest-pair.pcap"} {
		data, err := os.ReadFile("../../testdata/pcap/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data[:min(len(data), 1500)])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, opt := range []Options{{}, {Flows: true, JSON: true}} {
			s, _ := Run(bytes.NewReader(data), io.Discard, opt)
			if s.ICRCOK+s.ICRCBad+s.Malformed != s.RoCEv2 || s.RoCEv2 > s.Frames {
				t.Fatalf("summary does not add up: %+v", s)
			}
		}
	})
}
