package realtime_test

import (
	"bytes"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/internal/lockedbuf"
	"github.com/softirdma/softirdma/wire/ethswitch"
)

// fullAfter takes n bytes, then fails every write as a full disk does.
type fullAfter struct {
	lockedbuf.Buffer
	n int
}

func (f *fullAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, syscall.ENOSPC
	}
	f.n -= len(p)
	return f.Buffer.Write(p)
}

// A host's pcap that stops taking frames is not lost silently: CaptureErr says from which frame
// on and how many frames are missing, and why.
func TestHostCaptureErr(t *testing.T) {
	sw := ethswitch.New()
	peer := sw.NewPort("peer")
	h, err := realtime.NewHost(realtime.HostConfig{Name: "h", Link: sw.NewPort("h"), MAC: [6]byte{2, 0, 0, 0, 0, 1},
		IP: netip.MustParseAddr("192.0.2.1"), Pcap: &fullAfter{n: 24 + 16 + 60}}) // the header and one frame
	if err != nil {
		t.Fatal(err)
	}
	go h.Run()
	defer h.Close()
	// Broadcasts of a local experimental EtherType: the host takes them in and captures them.
	frame := append(bytes.Repeat([]byte{0xff}, 6), 2, 0, 0, 0, 0, 2, 0x88, 0xb5)
	frame = append(frame, make([]byte, 46)...)
	if _, err := peer.SendBatch([][]byte{frame, frame, frame}); err != nil {
		t.Fatal(err)
	}
	want := "the capture: 2 frames from frame 2 on not written: no space left on device"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if err := h.CaptureErr(); err != nil && err.Error() == want {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("CaptureErr: %v, want %q", err, want)
		}
	}
}
