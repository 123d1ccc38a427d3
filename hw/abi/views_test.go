package abi

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// viewFields name, for each layout, the view over its bytes and, by field name, the accessor
// of each field: Name() and SetName(v) for a number, Name() []byte for an array or a part; ""
// for a field no side uses.
var viewFields = map[string]struct {
	view    func(b []byte) any
	methods map[string]string
}{
	"ctrl_entry": {func(b []byte) any { return CtrlEntry(b) }, map[string]string{
		"opcode": "Opcode", "flags": "Flags", "status": "Status", "cookie": "Cookie", "result": "Results", "args": "Args"}},
	"page_list": {func(b []byte) any { return PageList(b) }, map[string]string{
		"addr": "Addr", "pages": "Pages", "shift": "Shift", "levels": "Levels"}},
	"num_args":        {func(b []byte) any { return NumArgs(b) }, map[string]string{"num": "Num"}},
	"query_port_args": {func(b []byte) any { return QueryPortArgs(b) }, map[string]string{"port": "Port"}},
	"query_gid_args": {func(b []byte) any { return QueryGIDArgs(b) }, map[string]string{
		"port": "Port", "index": "Index", "gid": "GID"}},
	"create_eq_args": {func(b []byte) any { return CreateEQArgs(b) }, map[string]string{
		"pages": "Pages", "log_count": "LogCount", "kind": "Kind", "vector": "Vector"}},
	"set_av_args": {func(b []byte) any { return SetAVArgs(b) }, map[string]string{"pages": "Pages", "entries": "Entries"}},
	"alloc_stag_args": {func(b []byte) any { return AllocSTagArgs(b) }, map[string]string{
		"pd": "PD", "kind": "Kind", "max_pages": "MaxPages"}},
	"rereg_mr_args": {func(b []byte) any { return ReregMRArgs(b) }, map[string]string{
		"stag": "STag", "flags": "Flags", "reg": "Reg"}},
	"create_cq_args": {func(b []byte) any { return CreateCQArgs(b) }, map[string]string{"queue": "Queue", "eqn": "EQ"}},
	"resize_cq_args": {func(b []byte) any { return ResizeCQArgs(b) }, map[string]string{"cqn": "Num", "queue": "Queue"}},
	"modify_cq_args": {func(b []byte) any { return ModifyCQArgs(b) }, map[string]string{"cqn": "Num", "count": "Count", "period": "Period"}},
	"modify_qp_args": {func(b []byte) any { return ModifyQPArgs(b) }, map[string]string{
		"qpn": "Num", "mask": "Mask", "attr": "Attr"}},
	"query_qp_args": {func(b []byte) any { return QueryQPArgs(b) }, map[string]string{"qpn": "Num", "attr": "Attr"}},
	"create_srq_args": {func(b []byte) any { return CreateSRQArgs(b) }, map[string]string{
		"pd": "PD", "max_sge": "MaxSGE", "limit": "Limit", "queue": "Queue"}},
	"modify_srq_args": {func(b []byte) any { return ModifySRQArgs(b) }, map[string]string{
		"srqn": "Num", "mask": "Mask", "limit": "Limit", "queue": "Queue"}},
	"reg_mr_args": {func(b []byte) any { return RegMRArgs(b) }, map[string]string{
		"pd": "PD", "access": "Access", "iova": "IOVA", "length": "Length", "offset": "Offset", "pages": "Pages"}},
	"queue_args": {func(b []byte) any { return QueueArgs(b) }, map[string]string{
		"log_count": "LogCount", "log_elem": "LogElem", "pages": "Pages"}},
	"create_qp_args": {func(b []byte) any { return CreateQPArgs(b) }, map[string]string{
		"pd": "PD", "type": "Type", "sig_all": "SigAll", "send_cq": "SendCQ", "recv_cq": "RecvCQ", "srq": "SRQ",
		"max_inline": "MaxInline", "max_send_sge": "SendSGE", "max_recv_sge": "RecvSGE", "sq": "SQ", "rq": "RQ"}},
	"qp_attr": {func(b []byte) any { return QPAttr(b) }, map[string]string{
		"state": "State", "cur_state": "CurState", "path_mtu": "PathMTU", "timeout": "Timeout", "retry_cnt": "RetryCnt",
		"rnr_retry": "RNRRetry", "min_rnr_timer": "MinRNRTimer", "max_rd_atomic": "MaxRdAtomic",
		"max_dest_rd_atomic": "MaxDestRdAtomic", "sgid_index": "SGIDIndex", "hop_limit": "HopLimit",
		"traffic_class": "TrafficClass", "port_num": "PortNum", "sq_drain_notify": "SQDrainNotify",
		"pkey_index": "PKeyIndex", "access_flags": "AccessFlags", "dest_qpn": "DestQPN", "rq_psn": "RQPSN",
		"sq_psn": "SQPSN", "flow_label": "FlowLabel", "dgid": "DGID", "dmac": "DMAC", "max_send_wr": "MaxSendWR",
		"max_recv_wr": "MaxRecvWR", "max_send_sge": "MaxSendSGE", "max_recv_sge": "MaxRecvSGE",
		"max_inline": "MaxInline", "qkey": "QKey"}},
	"reg_dma_args": {func(b []byte) any { return RegDMAArgs(b) }, map[string]string{"pd": "PD", "access": "Access"}},
	"mcast_args":   {func(b []byte) any { return McastArgs(b) }, map[string]string{"qpn": "QPN", "gid": "GID"}},
	"rxe_send_wqe": {func(b []byte) any { return SendWQE(b) }, map[string]string{
		"wr_id": "WRID", "opcode": "Opcode", "send_flags": "Flags", "ex": "Imm", "remote_addr": "RemoteAddr", "rkey": "RKey",
		"atomic_remote_addr": "RemoteAddr", "compare_add": "CompareAdd", "swap": "Swap", "atomic_rkey": "AtomicRKey",
		"remote_qpn": "RemoteQPN", "remote_qkey": "RemoteQKey", "pkey_index": "PKeyIndex", "ah_num": "AHNum", "av": "AV",
		"mw_addr": "MWAddr", "mw_length": "MWLength", "mw_mr_lkey": "MWMRLKey", "mw_mw_rkey": "MWRKey", "mw_rkey": "MWNewRKey",
		"mw_access": "MWAccess", "flush_remote_addr": "RemoteAddr", "flush_length": "FlushLength", "flush_rkey": "FlushRKey",
		"flush_type": "FlushType", "flush_level": "FlushLevel", "reg_key": "RegKey", "reg_access": "RegAccess",
		"reg_iova": "RegIOVA", "reg_length": "RegLength", "reg_offset": "RegOffset", "reg_pages": "RegPages",
		"iova": "IOVA", "dma_length": "DMALength", "dma_resid": "DMAResid", "dma_num_sge": "NumSGE",
		// Neither the device nor a driver uses these: rxe's kernel keeps its state there.
		"reserved": "", "status": "", "state": "", "mask": "", "first_psn": "", "last_psn": "", "ack_length": "",
		"ssn": "", "has_rd_atomic": "", "dma_cur_sge": "", "dma_sge_offset": ""}},
	"rxe_recv_wqe": {func(b []byte) any { return RecvWQE(b) }, map[string]string{
		"wr_id": "WRID", "dma_length": "DMALength", "dma_num_sge": "NumSGE", "reserved": ""}},
	"rxe_sge": {func(b []byte) any { return SGE(b) }, map[string]string{"addr": "Addr", "length": "Length", "lkey": "LKey"}},
	"rxe_av": {func(b []byte) any { return RXEAV(b) }, map[string]string{
		"port_num": "PortNum", "network_type": "NetworkType", "dmac": "DMAC", "dgid": "DGID", "flow_label": "FlowLabel",
		"sgid_index": "SGIDIndex", "hop_limit": "HopLimit", "traffic_class": "TrafficClass",
		"sgid_addr": "SGIDAddr", "dgid_addr": "DGIDAddr"}},
	"ib_uverbs_wc": {func(b []byte) any { return CQE(b) }, map[string]string{
		"wr_id": "WRID", "status": "Status", "opcode": "Opcode", "vendor_err": "VendorErr", "byte_len": "ByteLen",
		"ex": "Imm", "qp_num": "QPNum", "src_qp": "SrcQP", "wc_flags": "WCFlags", "pkey_index": "PKeyIndex",
		"slid": "SLID", "sl": "SL", "dlid_path_bits": "DLIDPathBits", "port_num": "PortNum", "network_hdr_type": "NetworkHdrType"}},
	"eq_entry": {func(b []byte) any { return EQEntry(b) }, map[string]string{"type": "Type", "num": "Num", "seq": "Seq"}},
	"fault_entry": {func(b []byte) any { return FaultEntry(b) }, map[string]string{
		"flags": "Flags", "qpn": "QPN", "seq": "Seq", "va": "VA", "stag": "STag", "pages": "Pages"}},
	"map_pages_args":   {func(b []byte) any { return MapPagesArgs(b) }, map[string]string{"stag": "STag", "va": "VA", "pages": "Pages"}},
	"unmap_pages_args": {func(b []byte) any { return UnmapPagesArgs(b) }, map[string]string{"stag": "STag", "va": "VA", "length": "Length"}},
	"resume_qp_args":   {func(b []byte) any { return ResumeQPArgs(b) }, map[string]string{"qpn": "QPN", "status": "Status"}},
	"av_entry": {func(b []byte) any { return AVEntry(b) }, map[string]string{
		"flags": "Flags", "pd": "PD", "dgid": "DGID", "flow_label": "FlowLabel", "sgid_index": "SGIDIndex",
		"hop_limit": "HopLimit", "traffic_class": "TrafficClass", "network_type": "NetworkType", "dmac": "DMAC"}},
	"eth_desc": {func(b []byte) any { return EthDesc(b) }, map[string]string{"addr": "Addr", "len": "Len", "flags": "Flags"}},
	"eth_ring_args": {func(b []byte) any { return EthRingArgs(b) }, map[string]string{
		"kind": "Kind", "vector": "Vector", "flags": "Flags", "queue": "Queue"}},
}

// setField writes v, truncated to the field, through the view's accessor: SetName for a
// number; for an array or a part, every byte of what Name returns gets v's low byte.
func setField(view any, name string, v uint64) (got func() uint64, err error) {
	r := reflect.ValueOf(view)
	get := r.MethodByName(name)
	if !get.IsValid() || get.Type().NumIn() != 0 || get.Type().NumOut() != 1 {
		return nil, fmt.Errorf("no accessor %s()", name)
	}
	if out := get.Type().Out(0); out.Kind() == reflect.Slice {
		part := get.Call(nil)[0]
		for i := range part.Len() {
			part.Index(i).SetUint(v & 0xff)
		}
		return func() uint64 { return get.Call(nil)[0].Index(0).Uint() }, nil
	}
	set := r.MethodByName("Set" + name)
	if !set.IsValid() || set.Type().NumIn() != 1 {
		return nil, fmt.Errorf("no setter Set%s", name)
	}
	set.Call([]reflect.Value{reflect.ValueOf(v).Convert(set.Type().In(0))})
	return func() uint64 { return get.Call(nil)[0].Uint() }, nil
}

// Every view reads and writes each field at the offset and width Layouts gives it (and so the
// generated C header), little-endian, touching no other byte; every field of a viewed layout
// has its accessor.
func TestViewsMatchLayouts(t *testing.T) {
	var v uint64 = 0x8877665544332211
	for _, l := range Layouts {
		vf, ok := viewFields[l.Name]
		if !ok {
			continue
		}
		for _, f := range l.Fields {
			name, ok := vf.methods[f.Name]
			if ok && name == "" {
				continue // a field no side reads or writes
			}
			b := make([]byte, l.Size)
			get, err := setField(vf.view(b), name, v)
			if err != nil {
				t.Errorf("%s.%s: %v", l.Name, f.Name, err)
				continue
			}
			want := make([]byte, l.Size)
			for i := range f.Size {
				want[f.Off+i] = byte(v >> (8 * i))
				if f.Array {
					want[f.Off+i] = byte(v)
				}
			}
			if !bytes.Equal(b, want) {
				t.Errorf("%s.%s: setting it wrote % x, want % x", l.Name, f.Name, b, want)
			}
			if got, wantV := get(), v&(1<<(8*min(f.Size, 8))-1); !f.Array && got != wantV {
				t.Errorf("%s.%s reads 0x%x, want 0x%x", l.Name, f.Name, got, wantV)
			}
		}
	}
	for name := range viewFields {
		if !slices.ContainsFunc(Layouts, func(l Layout) bool { return l.Name == name }) {
			t.Errorf("views of %s, which Layouts does not list", name)
		}
	}
}

// An entry's argument views lie at CtrlArgs and are exactly their layouts' sizes, so a setter
// cannot reach past them; a short slice is no entry.
func TestCtrlEntryArgViews(t *testing.T) {
	if _, ok := CtrlEntryOf(make([]byte, CtrlEntrySize-1)); ok {
		t.Error("a 127-byte slice is an entry")
	}
	e, ok := CtrlEntryOf(make([]byte, 2*CtrlEntrySize))
	if !ok || len(e) != CtrlEntrySize || cap(e) != CtrlEntrySize {
		t.Fatalf("CtrlEntryOf: len %d cap %d", len(e), cap(e))
	}
	for _, c := range []struct {
		name string
		view []byte
		size int
	}{
		{"num", e.NumArgs(), NumArgsSize}, {"query_port", e.QueryPortArgs(), QueryPortArgsSize},
		{"query_gid", e.QueryGIDArgs(), QueryGIDArgsSize}, {"create_eq", e.CreateEQArgs(), CreateEQArgsSize},
		{"set_av", e.SetAVArgs(), SetAVArgsSize}, {"alloc_stag", e.AllocSTagArgs(), AllocSTagArgsSize},
		{"reg_mr", e.RegMRArgs(), RegMRArgsSize}, {"rereg_mr", e.ReregMRArgs(), ReregMRArgsSize},
		{"reg_dma", e.RegDMAArgs(), RegDMAArgsSize}, {"mcast", e.McastArgs(), McastArgsSize},
		{"create_cq", e.CreateCQArgs(), CreateCQArgsSize}, {"resize_cq", e.ResizeCQArgs(), ResizeCQArgsSize},
		{"modify_cq", e.ModifyCQArgs(), ModifyCQArgsSize},
		{"create_qp", e.CreateQPArgs(), CreateQPArgsSize}, {"modify_qp", e.ModifyQPArgs(), ModifyQPArgsSize},
		{"query_qp", e.QueryQPArgs(), QueryQPArgsSize}, {"create_srq", e.CreateSRQArgs(), CreateSRQArgsSize},
		{"modify_srq", e.ModifySRQArgs(), ModifySRQArgsSize}, {"eth_ring", e.EthRingArgs(), EthRingArgsSize},
		{"map_pages", e.MapPagesArgs(), MapPagesArgsSize}, {"unmap_pages", e.UnmapPagesArgs(), UnmapPagesArgsSize},
		{"resume_qp", e.ResumeQPArgs(), ResumeQPArgsSize},
		{"args", e.Args(), CtrlEntrySize - CtrlArgs},
	} {
		if len(c.view) != c.size || cap(c.view) != c.size || &c.view[0] != &e[CtrlArgs] {
			t.Errorf("%s: len %d cap %d, want %d at the arguments", c.name, len(c.view), cap(c.view), c.size)
		}
	}
	e.SetResult(ResultSlot, 0xdeadbeef)
	e.SetQueryDeviceWord(QueryDeviceWords-1, 7)
	if e.Result(ResultSlot) != 0xdeadbeef || e[CtrlResult+4*ResultSlot] != 0xef || e.QueryDeviceWord(QueryDeviceWords-1) != 7 ||
		e[CtrlArgs+4*(QueryDeviceWords-1)] != 7 {
		t.Errorf("results or the query-device answer misplaced: % x", e)
	}
}

// A WQE's SGEs follow it, SGESize bytes apart; a send WQE's payload and ATOMIC_WRITE value
// start where the SGEs would.
func TestWQESGEs(t *testing.T) {
	s := SendWQE(make([]byte, SendWQESize+2*SGESize))
	s.SGE(1).SetLKey(0xabcd)
	r := RecvWQE(make([]byte, RecvWQESize+2*SGESize))
	r.SGE(1).SetAddr(0x1234)
	if s[SendSGEs+SGESize+SGELKey] != 0xcd || r[RecvSGEs+SGESize+SGEAddr] != 0x34 {
		t.Errorf("SGE 1 misplaced: send % x, recv % x", s[SendSGEs:], r[RecvSGEs:])
	}
	if &s.Payload()[0] != &s[SendSGEs] || &s.AtomicWrite()[0] != &s[SendAtomicWr] || len(s.AtomicWrite()) != 8 {
		t.Error("the payload or the ATOMIC_WRITE value is not where the SGEs start")
	}
}
