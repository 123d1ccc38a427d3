//go:build interop

package rdmacm_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
)

// tsharkCMFields are the CM fields tshark 4.0 (Debian bookworm) dissects: the REQ, REP, RTU, REJ,
// DREQ and DREP with their communication IDs, the REQ's service ID, QPN, starting PSN and rdma_cm
// header, the REP's QPN and PSN, the REJ's reason. It dissects no MRA and no SIDR message:
// those are checked for their attribute and for not being malformed.
var tsharkCMFields = []string{"infiniband.mad.attributeid",
	"infiniband.cm.req", "infiniband.cm.req.serviceid", "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn",
	"infiniband.cm.req.ip_cm.sport", "infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.dip4",
	"infiniband.cm.rep", "infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqpn", "infiniband.cm.rep.startpsn",
	"infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid",
	"infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid", "infiniband.cm.rej.reason",
	"infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
	"infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid"}

// ourCMFields is what our decoding says tshark's fields hold, for one CM message.
func ourCMFields(attr uint16, b []byte) (map[string]string, error) {
	n := func(v uint64) string { return strconv.FormatUint(v, 10) }
	f := map[string]string{"infiniband.mad.attributeid": n(uint64(attr))}
	switch attr {
	case cm.AttrREQ:
		q, err := cm.ParseREQ(b)
		if err != nil {
			return nil, err
		}
		h, err := cm.ParseHeader(q.Private[:])
		if err != nil {
			return nil, err
		}
		f["infiniband.cm.req"], f["infiniband.cm.req.serviceid"] = n(uint64(q.LocalCommID)), n(q.ServiceID)
		f["infiniband.cm.req.localqpn"], f["infiniband.cm.req.startpsn"] = n(uint64(q.LocalQPN)), n(uint64(q.StartingPSN))
		f["infiniband.cm.req.ip_cm.sport"] = n(uint64(h.SrcPort))
		f["infiniband.cm.req.ip_cm.sip4"], f["infiniband.cm.req.ip_cm.dip4"] = h.Src.String(), h.Dst.String()
	case cm.AttrREP:
		r, err := cm.ParseREP(b)
		if err != nil {
			return nil, err
		}
		f["infiniband.cm.rep"], f["infiniband.cm.rep.remotecommid"] = n(uint64(r.LocalCommID)), n(uint64(r.RemoteCommID))
		f["infiniband.cm.rep.localqpn"], f["infiniband.cm.rep.startpsn"] = n(uint64(r.LocalQPN)), n(uint64(r.StartingPSN))
	case cm.AttrRTU, cm.AttrDREP, cm.AttrDREQ:
		name := map[uint16]string{cm.AttrRTU: "rtu", cm.AttrDREP: "drsp", cm.AttrDREQ: "dreq"}[attr]
		p, err := cm.ParseRTU(b)
		if err != nil {
			return nil, err
		}
		f["infiniband.cm."+name+".localcommid"], f["infiniband.cm."+name+".remotecommid"] = n(uint64(p.LocalCommID)), n(uint64(p.RemoteCommID))
	case cm.AttrREJ:
		r, err := cm.ParseREJ(b)
		if err != nil {
			return nil, err
		}
		f["infiniband.cm.rej.localcommid"], f["infiniband.cm.rej.remotecommid"] = n(uint64(r.LocalCommID)), n(uint64(r.RemoteCommID))
		f["infiniband.cm.rej.reason"] = n(uint64(r.Reason))
	}
	return f, nil
}

// normal reads one of tshark's values as ourCMFields writes it: numbers (hex or decimal) in
// decimal, addresses as they are.
func normal(v string) string {
	if u, err := strconv.ParseUint(v, 0, 64); err == nil {
		return strconv.FormatUint(u, 10)
	}
	return v
}

// TestTsharkCM: tshark dissects the CM messages Linux sent in the rxe capture and those the
// connection manager sends in the simulator (connect, MRA, reject, SIDR, disconnect), and
// agrees with our decoding on every CM field it dissects, with nothing malformed. It runs under
// `make interop`, which installs tshark; a missing tshark fails it.
func TestTsharkCM(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatalf("tshark not found (make interop needs it; .ci/run installs it): %v", err)
	}
	// Our own: a connection made after an MRA, disconnected; a refusal; a SIDR exchange.
	n := newNet(t, rdmacm.Config{ResponseTimeout: 14, MaxRetries: 2, ServiceTimeout: 16})
	_, err = n.b.m.Listen(7174)
	must(t, err)
	idA, err := n.a.m.Connect(n.a.qp, n.b.dev.IP(), 7174, rdmacm.ConnParam{Private: []byte("tshark")})
	must(t, err)
	n.sim.RunFor(200 * time.Millisecond)
	must(t, n.b.events[0].ID.Accept(n.b.qp, rdmacm.ConnParam{}))
	n.run()
	must(t, idA.Disconnect())
	n.run()
	udB := n.b.udQP(t)
	_, err = n.b.m.ListenUD(7174)
	must(t, err)
	n.b.onRequest = func(e rdmacm.Event) { must(t, e.ID.Accept(udB, rdmacm.ConnParam{})) }
	_, err = n.a.m.ConnectUD(n.a.udQP(t), n.b.dev.IP(), 7174, nil)
	must(t, err)
	n.run()
	rc, err := n.a.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: n.a.cq, RecvCQ: n.a.cq,
		Cap: engine.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	_, err = n.a.m.Connect(rc, n.b.dev.IP(), 9999, rdmacm.ConnParam{})
	must(t, err)
	n.run()

	var frames [][]byte
	for _, src := range []io.Reader{bytes.NewReader(n.pcap.Bytes()), mustOpen(t, "../../testdata/pcap/rxe-rdmacm.pcap")} {
		r, err := wire.NewPcapReader(src)
		must(t, err)
		for {
			data, _, err := r.Next()
			if err == io.EOF {
				break
			}
			must(t, err)
			frames = append(frames, bytes.Clone(data))
		}
	}
	var pc bytes.Buffer
	w, err := wire.NewPcapWriter(&pc)
	must(t, err)
	for i, fr := range frames {
		ts := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Microsecond)
		must(t, w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(fr), Length: len(fr)}, fr))
	}
	file := filepath.Join(t.TempDir(), "cm.pcap")
	must(t, os.WriteFile(file, pc.Bytes(), 0o644))
	args := []string{"-r", file, "-T", "fields", "-E", "separator=|", "-e", "frame.number"}
	for _, f := range tsharkCMFields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, append(args, "-e", "_ws.malformed")...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark gave %d lines for %d frames", len(lines), len(frames))
	}
	var p wire.Parser
	var fr wire.Frame
	seen := map[string]int{}
	for i, line := range lines {
		if p.Parse(&fr, frames[i]) != nil || fr.DETH == nil || fr.BTH.DestQP() != 1 {
			continue
		}
		h, err := mad.Parse(fr.Payload)
		must(t, err)
		vals := strings.Split(line, "|")
		if len(vals) != len(tsharkCMFields)+2 {
			t.Fatalf("frame %d: tshark fields %q", i+1, line)
		}
		if vals[len(vals)-1] != "" {
			t.Errorf("frame %d (%s): tshark calls it malformed: %q", i+1, h.AttrName(), vals[len(vals)-1])
		}
		want, err := ourCMFields(h.AttrID, fr.Payload[mad.HeaderLen:])
		must(t, err)
		for k, name := range tsharkCMFields {
			w, ok := want[name]
			if !ok {
				continue
			}
			if got := normal(vals[k+1]); got != w {
				t.Errorf("frame %d (%s): %s is %q in tshark, %q in ours", i+1, h.AttrName(), name, vals[k+1], w)
			}
		}
		seen[h.AttrName()]++
	}
	// Every message kind went through tshark, Linux's and ours.
	for _, k := range []string{"REQ", "MRA", "REP", "RTU", "REJ", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP"} {
		if seen[k] == 0 {
			t.Errorf("no %s in the capture: %v", k, seen)
		}
	}
	t.Log(fmt.Sprint(seen))
}

func mustOpen(t *testing.T, name string) io.Reader {
	t.Helper()
	b, err := os.ReadFile(name)
	must(t, err)
	return bytes.NewReader(b)
}
