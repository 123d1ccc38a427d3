package fabric

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/internal/lockedbuf"
)

// A capture that cannot be written (its file closed under it) is reported once, naming the
// file, and counted; the fabric forwards on.
func TestCaptureFailureIsReportedOnce(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "fabric.pcap")
	var log lockedbuf.Buffer
	fab, err := New(Config{Pcap: pcap, Log: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	a, err := fab.AddPort("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fab.AddPort("b", 0)
	if err != nil {
		t.Fatal(err)
	}
	broadcast := append(bytes.Repeat([]byte{0xff}, 6), make([]byte, 54)...)
	send := func() {
		t.Helper()
		if _, err := a.SendBatch([][]byte{broadcast}); err != nil {
			t.Fatal(err)
		}
	}
	send()
	for deadline := time.Now().Add(20 * time.Second); fileSize(t, pcap) < 24+16+60; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first frame did not reach the file")
		}
	}
	fab.capture.file.Close()
	want := `level=WARN msg="cannot write the pcap: the frames from here on are not in it" pcap=` + pcap + ` frame=2 err="write ` + pcap + `: file already closed"`
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(log.String(), want); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning for the capture:\n%s", log.String())
		}
		send()
	}
	send()
	for deadline := time.Now().Add(20 * time.Second); b.Queued() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b holds %d frames", b.Queued())
		}
	}
	if strings.Count(log.String(), "cannot write the pcap") != 1 {
		t.Fatalf("reported more than once:\n%s", log.String())
	}
	if err := fab.CaptureErr(); err == nil || !errors.Is(err, os.ErrClosed) || !strings.HasPrefix(err.Error(), pcap+": ") {
		t.Fatalf("CaptureErr: %v", err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
