// Package pcapfile writes the frames a tap sees to a pcap and keeps account of those it could
// not write: a capture is read later as the record of what crossed a link (fault lists number
// its frames), so one that stops on a full disk or a closed file says so once, naming its file,
// rather than going on silently without them.
package pcapfile

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/pcapgo"
	"github.com/softirdma/softirdma/wire"
)

// Error is a capture that is missing frames: from the frame numbered First (the capture's
// numbering, from 1) on, Lost frames were not written, the first of them because of Err. Frames
// written into the file's buffer but not yet on disk when it failed are among them; the file
// holds the frames before First, the last of them possibly cut.
type Error struct {
	File  string // the capture's file, "" when its writer has no name
	First uint64
	Lost  uint64
	Err   error
}

func (e *Error) Error() string {
	name := e.File
	if name == "" {
		name = "the capture"
	}
	return fmt.Sprintf("%s: %d frames from frame %d on not written: %v", name, e.Lost, e.First, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Writer writes frames to a pcap through a buffer (Write, then Flush). Its writes are the
// caller's to serialise; Err may be called at any time.
//
// After the first failure it writes nothing more, so that the file stays a pcap of the frames
// before it, and counts each frame it is given as lost.
type Writer struct {
	buf     *bufio.Writer
	pw      *pcapgo.Writer
	file    string
	log     *slog.Logger
	written uint64 // frames on their way to the file: in it, or in buf since the last Flush
	pending uint64 // of written, those in buf since the last Flush

	lost   atomic.Uint64
	failed atomic.Pointer[Error] // the first failure, without the count
}

// New writes a pcap's file header (nanosecond timestamps, Ethernet) to w and returns a Writer
// for its frames. The first frame it cannot write is reported once on log (nil: slog's default
// logger), with w's name if w has one (an *os.File).
func New(w io.Writer, log *slog.Logger) (*Writer, error) {
	c := &Writer{buf: bufio.NewWriterSize(w, 64<<10), log: log}
	if n, ok := w.(interface{ Name() string }); ok {
		c.file = n.Name()
	}
	pw, err := wire.NewPcapWriter(c.buf)
	if err == nil {
		err = c.buf.Flush()
	}
	if err != nil {
		return nil, err
	}
	c.pw = pw
	return c, nil
}

// Write adds a frame seen at t; it is in the file after the next Flush.
func (c *Writer) Write(t time.Time, frame []byte) {
	if c.failed.Load() != nil {
		c.lost.Add(1)
		return
	}
	err := c.pw.WritePacket(gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(frame), Length: len(frame)}, frame)
	c.written++
	c.pending++
	if err != nil {
		c.fail(err)
	}
}

// Flush writes the frames added since the last Flush to the file.
func (c *Writer) Flush() {
	if c.failed.Load() != nil || c.pending == 0 {
		return
	}
	if err := c.buf.Flush(); err != nil {
		c.fail(err)
		return
	}
	c.pending = 0
}

// fail counts the frames in the buffer as lost, and reports err, the first failure.
func (c *Writer) fail(err error) {
	first := c.written - c.pending + 1
	c.lost.Add(c.pending)
	c.failed.Store(&Error{File: c.file, First: first, Err: err})
	log := c.log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("cannot write the pcap: the frames from here on are not in it", "pcap", c.file, "frame", first, "err", err)
}

// Err is nil while every frame given so far was written (or waits in the buffer for Flush),
// and an *Error once one could not be.
func (c *Writer) Err() error {
	f := c.failed.Load()
	if f == nil {
		return nil
	}
	e := *f
	e.Lost = c.lost.Load()
	return &e
}
