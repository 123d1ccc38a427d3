package qemu

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/softirdma/softirdma/wire/roce"
)

// Stream is the far end of "-netdev stream": frames over a TCP or UNIX stream connection, each
// behind its length as a 4-byte big-endian number.
type Stream struct {
	conn  net.Conn
	r     *FrameReader
	wmu   sync.Mutex
	w     *bufio.Writer
	stats stats
}

// NewStream runs the framing over an established connection (from net.Dial, or accepted from a
// listener QEMU connects to).
func NewStream(c net.Conn) *Stream {
	return &Stream{conn: c, r: NewFrameReader(c), w: bufio.NewWriterSize(c, 256<<10)}
}

// DialStream connects to QEMU listening with "-netdev stream,server=on": network is "tcp" or
// "unix".
func DialStream(network, addr string) (*Stream, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return nil, fmt.Errorf("qemu stream: %w", err)
	}
	return NewStream(c), nil
}

// Stats reports what the link did, including frames the reader dropped.
func (s *Stream) Stats() roce.LinkStats {
	st := s.stats.snapshot()
	st.RxDropped += s.r.Dropped()
	return st
}

// SendBatch writes the frames with their length prefixes in one write.
func (s *Stream) SendBatch(frames [][]byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var hdr [4]byte
	for i, f := range frames {
		if len(f) > roce.MaxFrameLen {
			return i, fmt.Errorf("qemu stream: frame of %d bytes exceeds %d", len(f), roce.MaxFrameLen)
		}
		binary.BigEndian.PutUint32(hdr[:], uint32(len(f)))
		if _, err := s.w.Write(hdr[:]); err != nil {
			return i, fmt.Errorf("qemu stream: %w", err)
		}
		if _, err := s.w.Write(f); err != nil {
			return i, fmt.Errorf("qemu stream: %w", err)
		}
		s.stats.txFrames.Add(1)
		s.stats.txBytes.Add(uint64(len(f)))
	}
	if err := s.w.Flush(); err != nil {
		return 0, fmt.Errorf("qemu stream: %w", err)
	}
	return len(frames), nil
}

// RecvBatch reads at least one frame, and then whatever more is already buffered.
func (s *Stream) RecvBatch(bufs [][]byte, sizes []int) (int, error) {
	n := 0
	for n < len(bufs) {
		if n > 0 && !s.r.Buffered() {
			break
		}
		size, err := s.r.Next(bufs[n])
		if err != nil {
			if n > 0 && errors.Is(err, io.EOF) {
				break
			}
			return n, err
		}
		sizes[n] = size
		s.stats.rxFrames.Add(1)
		s.stats.rxBytes.Add(uint64(size))
		n++
	}
	return n, nil
}

// Close closes the connection.
func (s *Stream) Close() error { return s.conn.Close() }

// FrameReader takes length-prefixed frames off a stream. A length out of range (shorter than an
// Ethernet header, or longer than MaxFrameLen) is counted, its bytes skipped, and reading goes
// on; the stream stays in step because the prefix says how much to skip.
type FrameReader struct {
	r       *bufio.Reader
	dropped uint64
}

// NewFrameReader reads frames from r.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 256<<10)}
}

// Dropped is how many frames were skipped.
func (f *FrameReader) Dropped() uint64 { return f.dropped }

// Buffered says whether the next frame's prefix has already arrived.
func (f *FrameReader) Buffered() bool { return f.r.Buffered() >= 4 }

// Next copies the next frame into buf and returns its length. A frame longer than buf is
// dropped like an out-of-range one. At the end of the stream it returns io.EOF, or
// io.ErrUnexpectedEOF when the stream ends inside a frame.
func (f *FrameReader) Next(buf []byte) (int, error) {
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n < roce.EthernetLen || n > roce.MaxFrameLen || int(n) > len(buf) {
			f.dropped++
			if _, err := f.r.Discard(int(n)); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return 0, err
			}
			continue
		}
		if _, err := io.ReadFull(f.r, buf[:n]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		return int(n), nil
	}
}
