package sim_test

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
)

func TestLinkConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  sim.LinkConfig
		want string // "" for valid
	}{
		{sim.LinkConfig{}, ""},
		{sim.LinkConfig{Latency: time.Millisecond, Loss: 1, Duplicate: 0.5, Reorder: 0, Corrupt: 1e-9, ReorderDelay: time.Second, Rate: 10e9}, ""},
		{sim.LinkConfig{Loss: 2}, "sim: link Loss 2 is not a probability from 0 to 1"},
		{sim.LinkConfig{Loss: -0.1}, "sim: link Loss -0.1 is not a probability from 0 to 1"},
		{sim.LinkConfig{Duplicate: math.NaN()}, "sim: link Duplicate NaN is not a probability from 0 to 1"},
		{sim.LinkConfig{Reorder: 1.5}, "sim: link Reorder 1.5 is not a probability from 0 to 1"},
		{sim.LinkConfig{Corrupt: math.Inf(1)}, "sim: link Corrupt +Inf is not a probability from 0 to 1"},
		{sim.LinkConfig{Latency: -time.Microsecond}, "sim: link Latency -1µs is negative"},
		{sim.LinkConfig{ReorderDelay: -1}, "sim: link ReorderDelay -1ns is negative"},
		{sim.LinkConfig{Rate: -1}, "sim: link Rate -1 bits per second is not a speed (0 for no limit)"},
		{sim.LinkConfig{Rate: math.NaN()}, "sim: link Rate NaN bits per second is not a speed (0 for no limit)"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || err.Error() != c.want+": invalid argument" || !errors.Is(err, syscall.EINVAL)):
			t.Errorf("%+v: %v\nwant %s", c.cfg, err, c.want)
		}
	}
}

// TestAddDeviceChecked: the checked variants refuse what AddDevice takes as it is, and a refusal
// adds nothing: the next device still gets the next address.
func TestAddDeviceChecked(t *testing.T) {
	fab := sim.NewFabric(sim.NewSim(), 1)
	a, err := fab.AddDeviceChecked("A", sim.LinkConfig{})
	if err != nil || a.Name() != "A" || a.IP() != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("A: %v %v", a, err)
	}
	var nilFab *sim.Fabric
	for _, c := range []struct {
		name string
		add  func() (*engine.Device, error)
		want string
	}{
		{"duplicate name", func() (*engine.Device, error) { return fab.AddDeviceChecked("A", sim.LinkConfig{}) },
			`sim: add device "A": the fabric has a device named "A"`},
		{"no name", func() (*engine.Device, error) { return fab.AddDeviceChecked("", sim.LinkConfig{}) },
			`sim: add device "": a device needs a name`},
		{"loss 2", func() (*engine.Device, error) { return fab.AddDeviceChecked("B", sim.LinkConfig{Loss: 2}) },
			`sim: add device "B": sim: link Loss 2 is not a probability from 0 to 1`},
		{"duplicate MAC", func() (*engine.Device, error) {
			return fab.AddDeviceAtChecked("B", a.MAC(), netip.MustParseAddr("192.0.2.9"), sim.LinkConfig{})
		}, `sim: add device "B": MAC 02:00:00:00:00:01 is device "A"'s`},
		{"duplicate IP", func() (*engine.Device, error) {
			return fab.AddDeviceAtChecked("B", [6]byte{2, 0, 0, 0, 0, 9}, netip.MustParseAddr("::ffff:192.0.2.1"), sim.LinkConfig{})
		}, `sim: add device "B": IP 192.0.2.1 is device "A"'s`},
		{"group MAC", func() (*engine.Device, error) {
			return fab.AddDeviceAtChecked("B", [6]byte{1, 0, 0x5e, 0, 0, 1}, netip.MustParseAddr("192.0.2.9"), sim.LinkConfig{})
		}, `sim: add device "B": MAC 01:00:5e:00:00:01 is not a unicast address`},
		{"no IP", func() (*engine.Device, error) {
			return fab.AddDeviceAtChecked("B", [6]byte{2, 0, 0, 0, 0, 9}, netip.Addr{}, sim.LinkConfig{})
		}, `sim: add device "B": IP invalid IP is not a unicast address`},
		{"nil fabric", func() (*engine.Device, error) { return nilFab.AddDeviceChecked("B", sim.LinkConfig{}) },
			`sim: add device "B": the fabric is nil`},
		{"no simulator", func() (*engine.Device, error) { return sim.NewFabric(nil, 1).AddDeviceChecked("B", sim.LinkConfig{}) },
			`sim: add device "B": the fabric has no simulator (NewFabric was given nil)`},
	} {
		dev, err := c.add()
		if dev != nil || err == nil || err.Error() != c.want+": invalid argument" || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %v %v\nwant %s", c.name, dev, err, c.want)
		}
	}
	b, err := fab.AddDeviceChecked("B", sim.LinkConfig{})
	if err != nil || b.IP() != netip.MustParseAddr("192.0.2.2") {
		t.Fatalf("B after the refusals: %v %v", b, err)
	}

	other := sim.NewFabric(sim.NewSim(), 1).AddDevice("X", sim.LinkConfig{})
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"bad config", fab.SetLinkChecked(b, sim.LinkConfig{Corrupt: -1}), "sim: set link of \"B\": sim: link Corrupt -1 is not a probability from 0 to 1"},
		{"another fabric's", fab.SetLinkChecked(other, sim.LinkConfig{}), "sim: set link of \"X\": the device is not on this fabric"},
		{"nil device", fab.SetLinkChecked(nil, sim.LinkConfig{}), "sim: set link: the device is nil"},
	} {
		if c.err == nil || c.err.Error() != c.want+": invalid argument" {
			t.Errorf("SetLinkChecked %s: %v\nwant %s", c.name, c.err, c.want)
		}
	}
	if err := fab.SetLinkChecked(b, sim.LinkConfig{Loss: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestAddDeviceClampsBadInput: AddDevice, which has no error to return, clamps a bad link as
// its documentation says: a negative latency is the default 1 µs, not frames that arrive
// before they were sent (or at once), and a loss above 1 loses every frame.
func TestAddDeviceClampsBadInput(t *testing.T) {
	s := sim.NewSim()
	fab := sim.NewFabric(s, 1)
	a := fab.AddDevice("A", sim.LinkConfig{Latency: -5 * time.Microsecond})
	b := fab.AddDevice("B", sim.LinkConfig{})
	lossy := fab.AddDevice("L", sim.LinkConfig{Loss: 2})
	var arrived []time.Duration
	b.OnOtherFrame(func([]byte) { arrived = append(arrived, s.Now()) })
	mac := b.MAC()
	frame := append(mac[:], 2, 0, 0, 0, 0, 1, 0x88, 0xb5) // an Ethernet header of a local experimental type
	frame = append(frame, make([]byte, 46)...)
	a.SendFrame(frame)
	lossy.SendFrame(frame)
	s.RunUntilIdle(0)
	if len(arrived) != 1 || arrived[0] != time.Microsecond {
		t.Fatalf("frames arrived at %v, want one at 1µs", arrived)
	}
}

// fullAfter takes n bytes, then fails every write as a full disk does.
type fullAfter struct{ n int }

func (f *fullAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, syscall.ENOSPC
	}
	f.n -= len(p)
	return len(p), nil
}

// sendFiveIntoFullPcap sends five 60-byte frames from A to B on a fabric whose pcap takes its
// header and two frames, then fails with ENOSPC.
func sendFiveIntoFullPcap(t *testing.T) *sim.Fabric {
	t.Helper()
	s := sim.NewSim()
	fab := sim.NewFabric(s, 1)
	if err := fab.CapturePcap(&fullAfter{n: 24 + 2*(16+60)}); err != nil {
		t.Fatal(err)
	}
	a, b := fab.AddDevice("A", sim.LinkConfig{}), fab.AddDevice("B", sim.LinkConfig{})
	mac := b.MAC()
	frame := append(mac[:], 2, 0, 0, 0, 0, 1, 0x88, 0xb5)
	frame = append(frame, make([]byte, 46)...)
	for range 5 {
		a.SendFrame(frame)
	}
	s.RunUntilIdle(0)
	return fab
}

// A pcap that stops taking frames is not lost silently: CaptureErr says from which frame on and
// how many frames are missing, and why.
func TestCaptureErrCountsFramesNotWritten(t *testing.T) {
	fab := sendFiveIntoFullPcap(t)
	if err := fab.CaptureErr(); err == nil || err.Error() != "the capture: 3 frames from frame 3 on not written: no space left on device" || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("CaptureErr: %v", err)
	}
}

// A pcap that stops taking frames says so once, as a warning on slog's default logger, with the
// number of the first frame it misses.
func TestCaptureFailureWarns(t *testing.T) {
	var log bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	sendFiveIntoFullPcap(t)
	if got := log.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `level=WARN msg="cannot write the pcap: the frames from here on are not in it" pcap="" frame=3 err="no space left on device"`) {
		t.Fatalf("log: %q", got)
	}
}

// TestCleanLinkLeavesLossAlone: frames on a link with no random fault draw no random numbers,
// so the frames a lossy link loses under a seed are the same whatever else crosses the fabric's
// clean links meanwhile; and those clean frames all arrive.
func TestCleanLinkLeavesLossAlone(t *testing.T) {
	const n = 60
	// delivered runs A sending n frames to B over a link losing 30%, C sending one to B over a
	// clean link after each of A's when busy, and returns which of A's arrived.
	delivered := func(busy bool) []bool {
		s := sim.NewSim()
		fab := sim.NewFabric(s, 7)
		a := fab.AddDevice("A", sim.LinkConfig{Loss: 0.3})
		b := fab.AddDevice("B", sim.LinkConfig{})
		c := fab.AddDevice("C", sim.LinkConfig{})
		mac := b.MAC()
		frame := append(mac[:], 2, 0, 0, 0, 0, 1, 0x88, 0xb5)
		frame = append(frame, make([]byte, 46)...)
		var got []bool
		for range n {
			before := fab.LinkStats(b).RxFrames
			a.SendFrame(frame)
			s.RunUntilIdle(0)
			got = append(got, fab.LinkStats(b).RxFrames == before+1)
			if busy {
				c.SendFrame(frame)
				s.RunUntilIdle(0)
			}
		}
		if busy {
			if st := fab.LinkStats(c); st.TxFrames != n {
				t.Fatalf("C sent %d frames, want %d", st.TxFrames, n)
			}
			if rx, lost := fab.LinkStats(b).RxFrames, countFalse(got); rx != 2*n-lost {
				t.Fatalf("B received %d frames: %d of A's lost, so C's clean link lost %d", rx, lost, 2*n-lost-rx)
			}
		}
		return got
	}
	quiet, busy := delivered(false), delivered(true)
	if lost := countFalse(quiet); lost == 0 || lost == n {
		t.Fatalf("A's link lost %d of %d frames: the seed does not test anything", lost, n)
	}
	for i := range quiet {
		if quiet[i] != busy[i] {
			t.Fatalf("A's frame %d: delivered %v alone, %v with C's traffic beside it", i, quiet[i], busy[i])
		}
	}
}

func countFalse(v []bool) uint64 {
	var k uint64
	for _, x := range v {
		if !x {
			k++
		}
	}
	return k
}
