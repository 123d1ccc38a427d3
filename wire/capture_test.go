package wire

import (
	"errors"
	"io"
	"os"
	"testing"

	"github.com/google/gopacket/layers"
)

// captureFiles are the frames recorded from Linux rxe; every RoCEv2 frame in them has a valid ICRC.
var captureFiles = []string{"rxe-pingpong.pcap", "rxe-perftest-pair.pcap"}

// readCapture returns copies of every frame of a file in ../testdata/pcap.
func readCapture(t testing.TB, name string) [][]byte {
	t.Helper()
	f, err := os.Open("../testdata/pcap/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewPcapReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("%s: link type %v", name, r.LinkType())
	}
	var out [][]byte
	for {
		data, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]byte(nil), data...))
	}
}

// roceFrames returns the RoCEv2 frames of a capture.
func roceFrames(t testing.TB, name string) [][]byte {
	var p Parser
	var f Frame
	var out [][]byte
	for _, b := range readCapture(t, name) {
		if err := p.Parse(&f, b); f.RoCE {
			out = append(out, b)
		} else if KindOf(err) != KindNotRoCE {
			t.Fatalf("%s: non-RoCE frame gave %v", name, err)
		}
	}
	return out
}

func TestGoldenCaptures(t *testing.T) {
	want := map[string]int{"rxe-pingpong.pcap": 112}
	for _, name := range captureFiles {
		t.Run(name, func(t *testing.T) {
			var p Parser
			var f Frame
			frames := roceFrames(t, name)
			if n, ok := want[name]; ok && len(frames) != n {
				t.Errorf("%d RoCEv2 frames, want %d", len(frames), n)
			}
			ops := map[Opcode]int{}
			for i, b := range frames {
				if err := p.Parse(&f, b); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				ops[f.Opcode]++
			}
			t.Logf("%d frames, opcodes %v", len(frames), ops)
		})
	}
}
