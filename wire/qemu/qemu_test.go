package qemu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire"
)

func frame(n int, seed byte) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = byte(i) + seed
	}
	return f
}

func bufs(n int) ([][]byte, []int) {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, wire.MaxFrameLen)
	}
	return b, make([]int, n)
}

// TestDgramPair wires two Dgram links to each other on loopback, as QEMU and softirdma are.
func TestDgramPair(t *testing.T) {
	a, err := ListenDgram("127.0.0.1:0", "127.0.0.1:9") // remote fixed below
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ListenDgram("127.0.0.1:0", a.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.remote = b.LocalAddr()

	sent := [][]byte{frame(60, 1), frame(1500, 2), frame(4200, 3), frame(9000, 4)}
	if n, err := b.SendBatch(sent); err != nil || n != len(sent) {
		t.Fatalf("SendBatch: %d %v", n, err)
	}
	got := recvAll(t, a, len(sent))
	for i := range sent {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("frame %d differs (%d vs %d bytes)", i, len(got[i]), len(sent[i]))
		}
	}
	// Runts and oversized datagrams are counted and dropped; the next good one still arrives.
	raw, err := net.DialUDP("udp", nil, a.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Write(make([]byte, 10))
	raw.Write(make([]byte, wire.MaxFrameLen+100))
	raw.Write(frame(100, 9))
	got = recvAll(t, a, 1)
	if !bytes.Equal(got[0], frame(100, 9)) || a.Stats().RxDropped != 2 {
		t.Fatalf("after bad datagrams: got %d bytes, dropped %d", len(got[0]), a.Stats().RxDropped)
	}
	if st := b.Stats(); st.TxFrames != 4 || st.TxBytes != 60+1500+4200+9000 {
		t.Fatalf("sender stats %+v", st)
	}
}

func recvAll(t *testing.T, l wire.Link, want int) [][]byte {
	t.Helper()
	var out [][]byte
	b, sizes := bufs(8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(out) < want {
			n, err := l.RecvBatch(b, sizes)
			if err != nil {
				t.Error(err)
				return
			}
			for i := range n {
				out = append(out, append([]byte(nil), b[i][:sizes[i]]...))
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("received %d of %d frames", len(out), want)
	}
	return out
}

func TestStreamPair(t *testing.T) {
	c1, c2 := net.Pipe()
	a, b := NewStream(c1), NewStream(c2)
	defer a.Close()
	defer b.Close()
	sent := [][]byte{frame(60, 1), frame(4200, 2), frame(9216, 3)}
	go func() {
		if _, err := a.SendBatch(sent); err != nil {
			t.Error(err)
		}
	}()
	got := recvAll(t, b, len(sent))
	for i := range sent {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if _, err := a.SendBatch([][]byte{make([]byte, wire.MaxFrameLen+1)}); err == nil {
		t.Fatal("an oversized frame was sent")
	}
}

// streamOf encodes frames with their prefixes, and lets a test put in bad prefixes.
func streamOf(parts ...any) []byte {
	var b bytes.Buffer
	for _, p := range parts {
		switch v := p.(type) {
		case []byte:
			binary.Write(&b, binary.BigEndian, uint32(len(v)))
			b.Write(v)
		case uint32: // a prefix with this length and that many junk bytes
			binary.Write(&b, binary.BigEndian, v)
			b.Write(make([]byte, v))
		}
	}
	return b.Bytes()
}

func TestFrameReaderSkipsBadLengths(t *testing.T) {
	in := streamOf(frame(100, 1), uint32(3), uint32(wire.MaxFrameLen+1), uint32(0), frame(200, 2))
	r := NewFrameReader(bytes.NewReader(in))
	buf := make([]byte, wire.MaxFrameLen)
	for _, want := range [][]byte{frame(100, 1), frame(200, 2)} {
		n, err := r.Next(buf)
		if err != nil || !bytes.Equal(buf[:n], want) {
			t.Fatalf("Next: %d bytes, %v", n, err)
		}
	}
	if r.Dropped() != 3 {
		t.Fatalf("dropped %d, want 3", r.Dropped())
	}
	if _, err := r.Next(buf); err != io.EOF {
		t.Fatalf("at the end: %v", err)
	}
	// A stream cut inside a frame.
	cut := streamOf(frame(100, 1))[:50]
	if _, err := NewFrameReader(bytes.NewReader(cut)).Next(buf); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut stream: %v", err)
	}
	// A frame larger than the caller's buffer is dropped too.
	r = NewFrameReader(bytes.NewReader(streamOf(frame(300, 1), frame(50, 2))))
	small := make([]byte, 100)
	n, err := r.Next(small)
	if err != nil || n != 50 || r.Dropped() != 1 {
		t.Fatalf("small buffer: %d %v dropped %d", n, err, r.Dropped())
	}
}

// FuzzFrameReader feeds arbitrary bytes to the stream framing: no panic, every frame returned
// has a length in range, and re-encoding the frames and dropped counts accounts for the input.
func FuzzFrameReader(f *testing.F) {
	f.Add(streamOf(frame(60, 1)))
	f.Add(streamOf(frame(14, 1), uint32(2), frame(9216, 3)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewFrameReader(bytes.NewReader(in))
		buf := make([]byte, wire.MaxFrameLen)
		for {
			n, err := r.Next(buf)
			if err != nil {
				if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if n < wire.EthernetLen || n > wire.MaxFrameLen {
				t.Fatalf("frame of %d bytes returned", n)
			}
		}
	})
}
