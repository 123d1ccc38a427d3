package pcapfile_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/internal/pcapfile"
	"github.com/softirdma/softirdma/wire"
)

// fullAfter accepts n bytes, then fails every write as a full disk does.
type fullAfter struct {
	bytes.Buffer
	n int
}

func (f *fullAfter) Write(p []byte) (int, error) {
	if f.Len()+len(p) > f.n {
		k := f.n - f.Len()
		f.Buffer.Write(p[:k])
		return k, syscall.ENOSPC
	}
	return f.Buffer.Write(p)
}

// frame is a 60-byte frame numbered i in its first byte.
func frame(i int) []byte {
	f := make([]byte, 60)
	f[0] = byte(i)
	return f
}

// A capture whose file fills up: the frames flushed before are in it, whole and in order; the
// first failure is reported once, on the writer's log, with the number of the first frame
// missing; every frame from it on is counted, none written.
func TestCaptureCountsWhatItCannotWrite(t *testing.T) {
	const header, record = 24, 16 + 60
	out := &fullAfter{n: header + 3*record + 10} // room for three frames and part of a fourth
	var log bytes.Buffer
	c, err := pcapfile.New(out, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		c.Write(time.Unix(0, int64(i)), frame(i))
		c.Flush()
	}
	if err := c.Err(); err != nil {
		t.Fatalf("three frames fit: %v", err)
	}
	for i := 4; i <= 9; i++ {
		c.Write(time.Unix(0, int64(i)), frame(i))
		if i%2 == 1 {
			c.Flush()
		}
	}
	var ce *pcapfile.Error
	if err := c.Err(); !errors.As(err, &ce) || ce.First != 4 || ce.Lost != 6 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Err: %+v (%v), want frames 4 to 9 lost on ENOSPC", ce, err)
	}
	if got := strings.Count(log.String(), "\n"); got != 1 || !strings.Contains(log.String(), `level=WARN msg="cannot write the pcap: the frames from here on are not in it" pcap="" frame=4 err="no space left on device"`) {
		t.Fatalf("log: %q", log.String())
	}
	r, err := wire.NewPcapReader(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		data, _, err := r.Next()
		if err != nil || !bytes.Equal(data, frame(i)) {
			t.Fatalf("frame %d: % x %v", i, data, err)
		}
	}
}

// The report names the file the capture goes to.
func TestCaptureNamesItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	c, err := pcapfile.New(f, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // the file closed under the capture
	c.Write(time.Now(), frame(1))
	c.Flush()
	c.Write(time.Now(), frame(2))
	c.Flush()
	err = c.Err()
	if want := path + ": 2 frames from frame 1 on not written: write " + path + ": file already closed"; err == nil || err.Error() != want {
		t.Fatalf("Err: %v, want %q", err, want)
	}
	if !strings.Contains(log.String(), " pcap="+path+" frame=1 err=") || strings.Count(log.String(), "\n") != 1 {
		t.Fatalf("log: %q", log.String())
	}
}

// A header that cannot be written is New's error.
func TestCaptureHeaderError(t *testing.T) {
	if _, err := pcapfile.New(&fullAfter{n: 10}, slog.New(slog.NewTextHandler(io.Discard, nil))); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("New on a full file: %v", err)
	}
}
