package decode

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
)

// TestDecodeUDAndUC: a capture of UD datagrams (one a CM REQ between GSI QPs) and of a UC stream
// that lost a packet and saw a duplicate, decoded frame by frame and with -flows.
func TestDecodeUDAndUC(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	bl := wire.NewBuilder(wire.Path{SrcIP: a, DstIP: b, SrcPort: 49500})
	var pcap bytes.Buffer
	w := newCaptureWriter(t, &pcap, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), time.Millisecond)
	put := func(h wire.Header, payload []byte) {
		t.Helper()
		fr, err := bl.Build(make([]byte, 2048), &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		w.add(fr)
	}
	ud := wire.Header{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: 0x16, QKey: 0x11111111, SrcQP: 0x15}
	put(ud, make([]byte, 40))
	ud.PSN++
	put(ud, make([]byte, 40))
	req := make([]byte, mad.Len)
	req[0], req[1], req[2], req[3] = 1, byte(mad.ClassCM), 2, byte(mad.MethodSend)
	binary.BigEndian.PutUint64(req[8:], 0xabc)
	binary.BigEndian.PutUint16(req[16:], mad.CMREQ)
	put(wire.Header{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: 1, QKey: mad.GSIQKey, SrcQP: 1, AckReq: true}, req)
	mtu := make([]byte, 256)
	for _, p := range []struct {
		op  wire.Opcode
		psn uint32
		n   int
	}{{wire.UCSendFirst, 10, 256}, {wire.UCSendMiddle, 11, 256}, {wire.UCSendLast, 13, 10}, {wire.UCSendOnly, 14, 10}, {wire.UCSendOnly, 14, 10}} {
		put(wire.Header{Opcode: p.op, PKey: 0xffff, DestQP: 0x22, PSN: p.psn}, mtu[:p.n])
	}
	capture := bytes.Clone(pcap.Bytes())
	var out bytes.Buffer
	sum, err := Run(&pcap, &out, Options{Flows: true})
	if err != nil || !sum.Clean() || sum.RoCEv2 != 8 {
		t.Fatalf("%v %+v", err, sum)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, want := range []string{
		"UD_SEND_ONLY qp=0x000016 psn=0 qkey=0x11111111",
		"qkey=0x11111111 src_qp=0x000015 payload=40 icrc=ok",
		"UD_SEND_ONLY qp=0x000001 psn=0 ackreq qkey=0x80010000 src_qp=0x000001 mad=CM/REQ:Send tid=0xabc cm=REQ comm=0x00000000 service=0x0 cm_qpn=0x000000 start_psn=0 payload=256 icrc=ok",
		"flows: 1 UC streams",
		"uc 10.0.0.1 -> 10.0.0.2 qp=0x000022 sport=49500: packets=5 bytes=",
		"messages=2 psn=10..14 gaps=1 missing_psns=1 behind=1 icrc_bad=0",
		"flows: 2 UD QP pairs",
		"ud 10.0.0.1 qp=0x000015 -> 10.0.0.2 qp=0x000016: datagrams=2 bytes=",
		"qkeys=0x11111111 icrc_bad=0",
		"ud 10.0.0.1 qp=0x000001 -> 10.0.0.2 qp=0x000001: datagrams=1 bytes=",
		"qkeys=0x80010000 icrc_bad=0 mads: CM/REQ:Send=1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// 8 frames, the UC stream and its heading, the UD pairs and theirs, the CM exchange and its
	// heading (a REQ that nothing answered), the summary.
	if !strings.Contains(out.String(), "cm 10.0.0.1 qp=0x000000 -> 10.0.0.2 qp=? service=0x0: REQ (no REP)") {
		t.Errorf("no unanswered CM exchange:\n%s", out.String())
	}
	if len(lines) != 8+2+3+2+1 {
		t.Errorf("%d lines:\n%s", len(lines), out.String())
	}
	var js bytes.Buffer
	if _, err := Run(bytes.NewReader(capture), &js, Options{Flows: true, JSON: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"mad":{"class":7,"class_name":"CM","method":3,"name":"CM/REQ Send","attr":16,"tid":"0xabc"}`,
		`{"type":"uc_flow","src":"10.0.0.1","dst":"10.0.0.2","dest_qp":34,"sport":49500,"packets":5,`,
		`{"type":"ud_flow","src":"10.0.0.1","src_qp":1,"dst":"10.0.0.2","dest_qp":1,"datagrams":1,"bytes":322,"icrc_bad":0,"qkeys":[2147549184],"mads":{"CM/REQ Send":1}}`} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, js.String())
		}
	}
}

// TestDecodeRxeUDPingpong: the ibv_ud_pingpong exchange in the rxe capture is two UD QP pairs,
// QP 0x15 to QP 0x15 each way, with ibv_ud_pingpong's Q_Key.
func TestDecodeRxeUDPingpong(t *testing.T) {
	out, _, err := runText(t, readCapture(t, "rxe-perftest-pair.pcap"), Options{Flows: true})
	if err != nil {
		t.Fatal(err)
	}
	outputHas(t, out,
		"flows: 2 UD QP pairs\n",
		"ud 192.168.77.3 qp=0x000015 -> 192.168.77.2 qp=0x000015: datagrams=3 bytes=1734 qkeys=0x11111111 icrc_bad=0\n",
		"ud 192.168.77.2 qp=0x000015 -> 192.168.77.3 qp=0x000015: datagrams=3 bytes=1734 qkeys=0x11111111 icrc_bad=0\n",
	)
}

// TestDecodeRxeRDMACM: the CM messages of two rxe guests running rping, ucmatose, udaddy and
// ib_write_bw -R, each named with its communication IDs, service, QPN, starting PSN and rdma_cm's
// addresses.
func TestDecodeRxeRDMACM(t *testing.T) {
	out, sum, err := runText(t, readCapture(t, "rxe-rdmacm.pcap"), Options{Flows: true})
	if err != nil || !sum.Clean() {
		t.Fatalf("%v %+v", err, sum)
	}
	outputHas(t, out,
		"mad=CM/REQ:Send tid=0x2f777e010 cm=REQ comm=0x10e077f7 service=0x1061c06(TCP:7174) cm_qpn=0x000011 start_psn=13451419 rdma_cm=192.168.77.3:37514->192.168.77.2 payload=256",
		"mad=CM/REP:Send tid=0x2f777e010 cm=REP comm=0x168378fd remote_comm=0x10e077f7 cm_qpn=0x000011 start_psn=10786805 payload=256",
		"mad=CM/RTU:Send tid=0x2f777e010 cm=RTU comm=0x10e077f7 remote_comm=0x168378fd payload=256",
		"mad=CM/DREQ:Send tid=0x2f777e010 cm=DREQ comm=0x10e077f7 remote_comm=0x168378fd cm_qpn=0x000011 payload=256",
		"cm=SIDR_REQ comm=0x13e077f7 service=0x1111c06(UDP:7174) rdma_cm=192.168.77.3:54350->192.168.77.2 payload=256",
		"cm=SIDR_REP comm=0x13e077f7 service=0x1111c06(UDP:7174) cm_qpn=0x000014 cm_qkey=0x01234567 status=SUCCESS payload=256",
		"mads: CM/DREP:Send=3 CM/DREQ:Send=2 CM/REQ:Send=5 CM/RTU:Send=5 CM/SIDR_REQ:Send=1",
	)
}

// TestCMExchangeFlows: -flows ties each CM exchange of the Linux capture to the QPs of the RC
// connection it set up, and shows the exchanges of the same capture with every RTU taken out as
// never completed.
func TestCMExchangeFlows(t *testing.T) {
	raw := readCapture(t, "rxe-rdmacm.pcap")
	var out bytes.Buffer
	if _, err := Run(bytes.NewReader(raw), &out, Options{Flows: true}); err != nil {
		t.Fatal(err)
	}
	outputHas(t, out.String(),
		"flows: 6 CM exchanges\n",
		// udaddy's: the UD QP it found, and the datagrams to it.
		"sidr 192.168.77.3 -> 192.168.77.2 qp=0x000014 qkey=0x01234567 service=UDP:7174: SIDR_REQ SIDR_REP (resolved)\n",
		"ud 192.168.77.3 qp=0x000014 -> 192.168.77.2 qp=0x000014:",
		"cm 192.168.77.3 qp=0x000011 -> 192.168.77.2 qp=0x000011 service=TCP:7174: REQ REP RTU DREQ DREP (disconnected)\n",
		"conn 192.168.77.2 qp=0x000011 <-> 192.168.77.3 qp=0x000011\n",
		"cm 192.168.77.3 qp=0x000012 -> 192.168.77.2 qp=0x000012 service=TCP:7471: REQ REP RTU DREQ DREP (disconnected)\n",
	)
	// The same capture without its RTUs.
	r, err := wire.NewPcapReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var cut bytes.Buffer
	w, err := wire.NewPcapWriter(&cut)
	if err != nil {
		t.Fatal(err)
	}
	var p wire.Parser
	var f wire.Frame
	for {
		data, ci, err := r.Next()
		if err != nil {
			break
		}
		if p.Parse(&f, data) == nil && f.DETH != nil {
			if h, err := mad.Parse(f.Payload); err == nil && h.AttrID == mad.CMRTU && h.MgmtClass == mad.ClassCM {
				continue
			}
		}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	var js bytes.Buffer
	if _, err := Run(bytes.NewReader(cut.Bytes()), &out, Options{Flows: true}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), ": REQ REP DREQ DREP (no RTU)\n"); n != 5 {
		t.Fatalf("%d exchanges without their RTU:\n%s", n, out.String())
	}
	if _, err := Run(bytes.NewReader(cut.Bytes()), &js, Options{Flows: true, JSON: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `{"type":"cm_flow","active":"192.168.77.3","active_qpn":17,`) || !strings.Contains(js.String(), `"outcome":"no RTU"`) {
		t.Fatalf("JSON:\n%s", js.String())
	}
}

// TestSIDRExchangeOutcomes: a SIDR_REQ refused, and one never answered, as -flows tells them.
func TestSIDRExchangeOutcomes(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	msg := func(attr uint16, put func([]byte) error) (mad.Header, []byte) {
		data := make([]byte, mad.HeaderLen+cm.DataLen)
		if err := put(data[mad.HeaderLen:]); err != nil {
			t.Fatal(err)
		}
		return mad.Header{MgmtClass: mad.ClassCM, Method: mad.MethodSend, AttrID: attr}, data
	}
	var c cmExchanges
	for id, answer := range map[uint32]bool{7: true, 8: false} {
		q := cm.SIDRREQ{RequestID: id, ServiceID: cm.ServiceID(cm.PSUDP, 7174)}
		h, d := msg(cm.AttrSIDRREQ, q.Put)
		c.add(a, b, h, d)
		if answer {
			r := cm.SIDRREP{RequestID: id, Status: cm.SIDRReject, ServiceID: q.ServiceID}
			h, d = msg(cm.AttrSIDRREP, r.Put)
			c.add(b, a, h, d)
		}
	}
	got := map[uint32]string{}
	for _, x := range c.exchanges() {
		got[x.ActiveID] = x.Line()
	}
	if got[7] != "sidr 192.0.2.1 -> 192.0.2.2 qp=? service=UDP:7174: SIDR_REQ SIDR_REP (refused: REJECT)" ||
		got[8] != "sidr 192.0.2.1 -> 192.0.2.2 qp=? service=UDP:7174: SIDR_REQ (no SIDR_REP)" {
		t.Fatalf("%v", got)
	}
}

// outputHas fails t for each of wants that out lacks.
func outputHas(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
