// Package pcaptest reads captures for the tests of wire's packages (the recorded ones under
// testdata/pcap, and those a test writes), so that each test speaks of the frames rather than
// of readers.
package pcaptest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/softirdma/softirdma/wire"
)

// Frames returns a copy of every frame of the capture file at path, in order; a file that
// cannot be read to its end fails tb.
func Frames(tb testing.TB, path string) [][]byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return Read(tb, bytes.NewReader(data))
}

// Read returns a copy of every frame of the capture r holds, in order; a capture that cannot
// be read to its end fails tb.
func Read(tb testing.TB, r io.Reader) [][]byte {
	tb.Helper()
	frames, err := all(r)
	if err != nil {
		tb.Fatal(err)
	}
	return frames
}

func all(r io.Reader) (frames [][]byte, err error) {
	pr, err := wire.NewPcapReader(r)
	if err != nil {
		return nil, err
	}
	for err == nil {
		var frame []byte
		if frame, _, err = pr.Next(); err == nil {
			frames = append(frames, bytes.Clone(frame))
		}
	}
	if errors.Is(err, io.EOF) {
		return frames, nil
	}
	return nil, err
}
