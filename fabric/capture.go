package fabric

import (
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/softirdma/softirdma/internal/pcapfile"
	"github.com/softirdma/softirdma/wire/roce"
)

// captureQueue is how many frames wait for the capture's writer before the switch waits for
// it: the capture holds every frame, so a writer behind holds the switch back rather than
// lose one. At the largest frames that is some 10 MB.
const captureQueue = 1024

// capture writes the fabric's pcap off the switch's lock. The switch calls its tap under its
// lock, once a frame and in the order the fault plan numbers them; the tap only copies the
// frame into a queue, in that order, and a goroutine of the capture's writes the queue to the
// file, flushing whenever it has caught up.
type capture struct {
	file  *os.File
	w     *pcapfile.Writer
	queue chan captured
	free  chan []byte // copies' buffers, back from the writer
	done  chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// captured is one frame the switch forwarded, at t.
type captured struct {
	t     time.Time
	frame []byte
}

// startCapture creates the pcap at path, writes its header and starts the writer.
func startCapture(path string, log *slog.Logger) (*capture, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, &Error{Msg: "cannot create the pcap", Attrs: []any{"pcap", path}, Err: err}
	}
	w, err := pcapfile.New(f, log)
	if err != nil {
		f.Close()
		return nil, &Error{Msg: "cannot write the pcap", Attrs: []any{"pcap", path}, Err: err}
	}
	c := &capture{file: f, w: w, queue: make(chan captured, captureQueue), free: make(chan []byte, captureQueue),
		done: make(chan struct{})}
	go c.write()
	return c, nil
}

// tap is the switch's tap: a copy of the frame joins the queue.
func (c *capture) tap(_ string, t time.Time, frame []byte) {
	var b []byte
	select {
	case b = <-c.free:
	default:
		b = make([]byte, 0, roce.MaxFrameLen)
	}
	c.queue <- captured{t, append(b[:0], frame...)}
}

// write writes the queue to the file until it is closed.
func (c *capture) write() {
	defer close(c.done)
	for r := range c.queue {
		c.w.Write(r.t, r.frame)
		select {
		case c.free <- r.frame:
		default:
		}
		if len(c.queue) == 0 {
			c.w.Flush()
		}
	}
	c.w.Flush()
}

// err is the capture's pcapfile.Error, or nil.
func (c *capture) err() error { return c.w.Err() }

// close ends the queue, once the switch calls the tap no more, and waits until the file holds
// what was in it. Only the first call does anything.
func (c *capture) close() error {
	c.closeOnce.Do(func() {
		close(c.queue)
		<-c.done
		c.closeErr = c.file.Close()
	})
	return c.closeErr
}
