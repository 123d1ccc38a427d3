// Package pcaptest reads the recorded captures under testdata/pcap for the tests of wire's
// packages, so that each test speaks of the frames rather than of opening files.
package pcaptest

import (
	"errors"
	"io"
	"os"
	"testing"

	"github.com/softirdma/softirdma/wire"
)

// Frames returns a copy of every frame of the capture at path, in order; a file that cannot be
// opened or read to its end fails tb.
func Frames(tb testing.TB, path string) [][]byte {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := wire.NewPcapReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	for {
		data, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, append([]byte(nil), data...))
	}
}
