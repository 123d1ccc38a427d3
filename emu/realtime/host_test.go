package realtime_test

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
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

// recordingLink is a roce.Link that keeps the size of each SendBatch and receives nothing.
type recordingLink struct {
	mu      sync.Mutex
	batches []int
	frames  int
	closed  chan struct{}
}

func (l *recordingLink) SendBatch(frames [][]byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches = append(l.batches, len(frames))
	l.frames += len(frames)
	return len(frames), nil
}

func (l *recordingLink) RecvBatch([][]byte, []int) (int, error) {
	<-l.closed
	return 0, errors.New("closed")
}

func (l *recordingLink) Close() error { close(l.closed); return nil }

// What a device has waiting for a socket link leaves in one SendBatch (sendmmsg), not a call a
// frame: 32 WRITEs posted together go out in fewer calls than frames, every frame captured.
func TestHostSendsInBatches(t *testing.T) {
	link := &recordingLink{closed: make(chan struct{})}
	var captured atomic.Int64
	h, err := realtime.NewHost(realtime.HostConfig{Name: "h", Link: link, MAC: [6]byte{2, 0, 0, 0, 0, 1}, IP: netip.MustParseAddr("192.0.2.1"),
		Tap: func([]byte) { captured.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	go h.Run()
	defer h.Close()
	dev := h.Device()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(64)
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: engine.QPCap{MaxSendWR: 32, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddr("192.0.2.2")
	h.Neighbors().Learn(peer, [6]byte{2, 0, 0, 0, 0, 2})
	for _, m := range []struct {
		attr engine.QPAttr
		mask engine.AttrMask
	}{
		{engine.QPAttr{State: engine.QPSInit, Port: 1}, engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrAccessFlags},
		{engine.QPAttr{State: engine.QPSRTR, AH: engine.AHAttr{DGID: peer, HopLimit: 64}, PathMTU: engine.MTU1024, DestQPN: 0x11, MinRNRTimer: 12},
			engine.AttrState | engine.AttrAV | engine.AttrPathMTU | engine.AttrDestQPN | engine.AttrRQPSN | engine.AttrMaxDestRdAtomic | engine.AttrMinRNRTimer},
		{engine.QPAttr{State: engine.QPSRTS, Timeout: 20, RetryCnt: 7, RNRRetry: 7}, engine.AttrState | engine.AttrSQPSN | engine.AttrTimeout | engine.AttrRetryCnt | engine.AttrRNRRetry | engine.AttrMaxQPRdAtomic},
	} {
		if err := qp.Modify(m.attr, m.mask); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	mr, _ := pd.RegMR(buf, engine.AccessLocalWrite)
	wrs := make([]engine.SendWR, 32)
	for i := range wrs {
		wrs[i] = engine.SendWR{ID: uint64(i), Opcode: engine.WRRDMAWrite, SGL: []engine.SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}, RemoteAddr: 0x1000, RKey: 0x1234}
	}
	if err := qp.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		link.mu.Lock()
		frames, calls := link.frames, len(link.batches)
		link.mu.Unlock()
		if frames >= 32 {
			if calls >= frames || captured.Load() < int64(frames) {
				t.Fatalf("%d frames in %d SendBatch calls (%v), %d captured: want fewer calls than frames, every frame captured", frames, calls, link.batches, captured.Load())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d frames sent in 10 s, want 32", frames)
		}
	}
}

// A host's device has the send window it was configured with, and so has the device a driver's
// addresses make in its place (Rebind): serve's -send-window reaches the engine its guest uses.
func TestHostKeepsSendWindowAcrossRebind(t *testing.T) {
	sw := ethswitch.New()
	h, err := realtime.NewHost(realtime.HostConfig{Name: "h", Link: sw.NewPort("h"), MAC: [6]byte{2, 0, 0, 0, 0, 1},
		IP: netip.MustParseAddr("192.0.2.1"), SendWindow: 1024})
	if err != nil {
		t.Fatal(err)
	}
	go h.Run()
	defer h.Close()
	if got := h.Device().SendWindow(); got != 1024 {
		t.Fatalf("the host's device has a send window of %d, want 1024", got)
	}
	dev := h.Rebind([6]byte{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("192.0.2.2"), nil)
	if got := dev.SendWindow(); got != 1024 {
		t.Fatalf("the device Rebind made has a send window of %d, want 1024", got)
	}
}
