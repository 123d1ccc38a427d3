package abi

import (
	"bytes"
	"testing"
)

// accessor is one field of a view: set writes v truncated to the field, get reads it back.
type accessor struct {
	set func(b []byte, v uint64)
	get func(b []byte) uint64
}

func u8f(get func([]byte) uint8, set func([]byte, uint8)) accessor {
	return accessor{func(b []byte, v uint64) { set(b, uint8(v)) }, func(b []byte) uint64 { return uint64(get(b)) }}
}

func u16f(get func([]byte) uint16, set func([]byte, uint16)) accessor {
	return accessor{func(b []byte, v uint64) { set(b, uint16(v)) }, func(b []byte) uint64 { return uint64(get(b)) }}
}

func u32f(get func([]byte) uint32, set func([]byte, uint32)) accessor {
	return accessor{func(b []byte, v uint64) { set(b, uint32(v)) }, func(b []byte) uint64 { return uint64(get(b)) }}
}

func u64f(get func([]byte) uint64, set func([]byte, uint64)) accessor {
	return accessor{func(b []byte, v uint64) { set(b, v) }, get}
}

// bytesf is a byte-array field or a part's view: it fills the part with v's low byte.
func bytesf(part func([]byte) []byte) accessor {
	return accessor{func(b []byte, v uint64) {
		for i := range part(b) {
			part(b)[i] = byte(v)
		}
	}, func(b []byte) uint64 { return uint64(part(b)[0]) }}
}

// viewAccessors are every field of every control layout, by layout and field name.
var viewAccessors = map[string]map[string]accessor{
	"ctrl_entry": {
		"opcode": u16f(func(b []byte) uint16 { return CtrlEntry(b).Opcode() }, func(b []byte, v uint16) { CtrlEntry(b).SetOpcode(v) }),
		"flags":  u16f(func(b []byte) uint16 { return CtrlEntry(b).Flags() }, func(b []byte, v uint16) { CtrlEntry(b).SetFlags(v) }),
		"status": u32f(func(b []byte) uint32 { return CtrlEntry(b).Status() }, func(b []byte, v uint32) { CtrlEntry(b).SetStatus(v) }),
		"cookie": u64f(func(b []byte) uint64 { return CtrlEntry(b).Cookie() }, func(b []byte, v uint64) { CtrlEntry(b).SetCookie(v) }),
		"result": bytesf(func(b []byte) []byte { return CtrlEntry(b).ResultBytes()[:16] }),
		"args":   bytesf(func(b []byte) []byte { return CtrlEntry(b).Args() }),
	},
	"page_list": {
		"addr":   u64f(func(b []byte) uint64 { return PageList(b).Addr() }, func(b []byte, v uint64) { PageList(b).SetAddr(v) }),
		"pages":  u32f(func(b []byte) uint32 { return PageList(b).Pages() }, func(b []byte, v uint32) { PageList(b).SetPages(v) }),
		"shift":  u8f(func(b []byte) uint8 { return PageList(b).Shift() }, func(b []byte, v uint8) { PageList(b).SetShift(v) }),
		"levels": u8f(func(b []byte) uint8 { return PageList(b).Levels() }, func(b []byte, v uint8) { PageList(b).SetLevels(v) }),
	},
	"num_args": {
		"num": u32f(func(b []byte) uint32 { return NumArgs(b).Num() }, func(b []byte, v uint32) { NumArgs(b).SetNum(v) }),
	},
	"query_port_args": {
		"port": u32f(func(b []byte) uint32 { return QueryPortArgs(b).Port() }, func(b []byte, v uint32) { QueryPortArgs(b).SetPort(v) }),
	},
	"query_gid_args": {
		"port":  u32f(func(b []byte) uint32 { return QueryGIDArgs(b).Port() }, func(b []byte, v uint32) { QueryGIDArgs(b).SetPort(v) }),
		"index": u32f(func(b []byte) uint32 { return QueryGIDArgs(b).Index() }, func(b []byte, v uint32) { QueryGIDArgs(b).SetIndex(v) }),
		"gid":   bytesf(func(b []byte) []byte { return QueryGIDArgs(b).GID() }),
	},
	"create_eq_args": {
		"pages":     bytesf(func(b []byte) []byte { return CreateEQArgs(b).Pages() }),
		"log_count": u8f(func(b []byte) uint8 { return CreateEQArgs(b).LogCount() }, func(b []byte, v uint8) { CreateEQArgs(b).SetLogCount(v) }),
		"kind":      u8f(func(b []byte) uint8 { return CreateEQArgs(b).Kind() }, func(b []byte, v uint8) { CreateEQArgs(b).SetKind(v) }),
		"vector":    u16f(func(b []byte) uint16 { return CreateEQArgs(b).Vector() }, func(b []byte, v uint16) { CreateEQArgs(b).SetVector(v) }),
	},
	"set_av_args": {
		"pages":   bytesf(func(b []byte) []byte { return SetAVArgs(b).Pages() }),
		"entries": u32f(func(b []byte) uint32 { return SetAVArgs(b).Entries() }, func(b []byte, v uint32) { SetAVArgs(b).SetEntries(v) }),
	},
	"alloc_stag_args": {
		"pd":        u32f(func(b []byte) uint32 { return AllocSTagArgs(b).PD() }, func(b []byte, v uint32) { AllocSTagArgs(b).SetPD(v) }),
		"kind":      u32f(func(b []byte) uint32 { return AllocSTagArgs(b).Kind() }, func(b []byte, v uint32) { AllocSTagArgs(b).SetKind(v) }),
		"max_pages": u32f(func(b []byte) uint32 { return AllocSTagArgs(b).MaxPages() }, func(b []byte, v uint32) { AllocSTagArgs(b).SetMaxPages(v) }),
	},
	"rereg_mr_args": {
		"stag":  u32f(func(b []byte) uint32 { return ReregMRArgs(b).STag() }, func(b []byte, v uint32) { ReregMRArgs(b).SetSTag(v) }),
		"flags": u32f(func(b []byte) uint32 { return ReregMRArgs(b).Flags() }, func(b []byte, v uint32) { ReregMRArgs(b).SetFlags(v) }),
		"reg":   bytesf(func(b []byte) []byte { return ReregMRArgs(b).Reg() }),
	},
	"create_cq_args": {
		"queue": bytesf(func(b []byte) []byte { return CreateCQArgs(b).Queue() }),
		"eqn":   u32f(func(b []byte) uint32 { return CreateCQArgs(b).EQ() }, func(b []byte, v uint32) { CreateCQArgs(b).SetEQ(v) }),
	},
	"resize_cq_args": {
		"cqn":   u32f(func(b []byte) uint32 { return ResizeCQArgs(b).Num() }, func(b []byte, v uint32) { ResizeCQArgs(b).SetNum(v) }),
		"queue": bytesf(func(b []byte) []byte { return ResizeCQArgs(b).Queue() }),
	},
	"modify_qp_args": {
		"qpn":  u32f(func(b []byte) uint32 { return ModifyQPArgs(b).Num() }, func(b []byte, v uint32) { ModifyQPArgs(b).SetNum(v) }),
		"mask": u32f(func(b []byte) uint32 { return ModifyQPArgs(b).Mask() }, func(b []byte, v uint32) { ModifyQPArgs(b).SetMask(v) }),
		"attr": bytesf(func(b []byte) []byte { return ModifyQPArgs(b).Attr() }),
	},
	"query_qp_args": {
		"qpn":  u32f(func(b []byte) uint32 { return QueryQPArgs(b).Num() }, func(b []byte, v uint32) { QueryQPArgs(b).SetNum(v) }),
		"attr": bytesf(func(b []byte) []byte { return QueryQPArgs(b).Attr() }),
	},
	"create_srq_args": {
		"pd":      u32f(func(b []byte) uint32 { return CreateSRQArgs(b).PD() }, func(b []byte, v uint32) { CreateSRQArgs(b).SetPD(v) }),
		"max_sge": u32f(func(b []byte) uint32 { return CreateSRQArgs(b).MaxSGE() }, func(b []byte, v uint32) { CreateSRQArgs(b).SetMaxSGE(v) }),
		"limit":   u32f(func(b []byte) uint32 { return CreateSRQArgs(b).Limit() }, func(b []byte, v uint32) { CreateSRQArgs(b).SetLimit(v) }),
		"queue":   bytesf(func(b []byte) []byte { return CreateSRQArgs(b).Queue() }),
	},
	"modify_srq_args": {
		"srqn":  u32f(func(b []byte) uint32 { return ModifySRQArgs(b).Num() }, func(b []byte, v uint32) { ModifySRQArgs(b).SetNum(v) }),
		"mask":  u32f(func(b []byte) uint32 { return ModifySRQArgs(b).Mask() }, func(b []byte, v uint32) { ModifySRQArgs(b).SetMask(v) }),
		"limit": u32f(func(b []byte) uint32 { return ModifySRQArgs(b).Limit() }, func(b []byte, v uint32) { ModifySRQArgs(b).SetLimit(v) }),
		"queue": bytesf(func(b []byte) []byte { return ModifySRQArgs(b).Queue() }),
	},
	"reg_mr_args": {
		"pd":     u32f(func(b []byte) uint32 { return RegMRArgs(b).PD() }, func(b []byte, v uint32) { RegMRArgs(b).SetPD(v) }),
		"access": u32f(func(b []byte) uint32 { return RegMRArgs(b).Access() }, func(b []byte, v uint32) { RegMRArgs(b).SetAccess(v) }),
		"iova":   u64f(func(b []byte) uint64 { return RegMRArgs(b).IOVA() }, func(b []byte, v uint64) { RegMRArgs(b).SetIOVA(v) }),
		"length": u64f(func(b []byte) uint64 { return RegMRArgs(b).Length() }, func(b []byte, v uint64) { RegMRArgs(b).SetLength(v) }),
		"offset": u64f(func(b []byte) uint64 { return RegMRArgs(b).Offset() }, func(b []byte, v uint64) { RegMRArgs(b).SetOffset(v) }),
		"pages":  bytesf(func(b []byte) []byte { return RegMRArgs(b).Pages() }),
	},
	"queue_args": {
		"log_count": u8f(func(b []byte) uint8 { return QueueArgs(b).LogCount() }, func(b []byte, v uint8) { QueueArgs(b).SetLogCount(v) }),
		"log_elem":  u8f(func(b []byte) uint8 { return QueueArgs(b).LogElem() }, func(b []byte, v uint8) { QueueArgs(b).SetLogElem(v) }),
		"pages":     bytesf(func(b []byte) []byte { return QueueArgs(b).Pages() }),
	},
	"create_qp_args": {
		"pd":           u32f(func(b []byte) uint32 { return CreateQPArgs(b).PD() }, func(b []byte, v uint32) { CreateQPArgs(b).SetPD(v) }),
		"type":         u8f(func(b []byte) uint8 { return CreateQPArgs(b).Type() }, func(b []byte, v uint8) { CreateQPArgs(b).SetType(v) }),
		"sig_all":      u8f(func(b []byte) uint8 { return CreateQPArgs(b).SigAll() }, func(b []byte, v uint8) { CreateQPArgs(b).SetSigAll(v) }),
		"send_cq":      u32f(func(b []byte) uint32 { return CreateQPArgs(b).SendCQ() }, func(b []byte, v uint32) { CreateQPArgs(b).SetSendCQ(v) }),
		"recv_cq":      u32f(func(b []byte) uint32 { return CreateQPArgs(b).RecvCQ() }, func(b []byte, v uint32) { CreateQPArgs(b).SetRecvCQ(v) }),
		"srq":          u32f(func(b []byte) uint32 { return CreateQPArgs(b).SRQ() }, func(b []byte, v uint32) { CreateQPArgs(b).SetSRQ(v) }),
		"max_inline":   u32f(func(b []byte) uint32 { return CreateQPArgs(b).MaxInline() }, func(b []byte, v uint32) { CreateQPArgs(b).SetMaxInline(v) }),
		"max_send_sge": u16f(func(b []byte) uint16 { return CreateQPArgs(b).SendSGE() }, func(b []byte, v uint16) { CreateQPArgs(b).SetSendSGE(v) }),
		"max_recv_sge": u16f(func(b []byte) uint16 { return CreateQPArgs(b).RecvSGE() }, func(b []byte, v uint16) { CreateQPArgs(b).SetRecvSGE(v) }),
		"sq":           bytesf(func(b []byte) []byte { return CreateQPArgs(b).SQ() }),
		"rq":           bytesf(func(b []byte) []byte { return CreateQPArgs(b).RQ() }),
	},
	"qp_attr": {
		"state":              u8f(func(b []byte) uint8 { return QPAttr(b).State() }, func(b []byte, v uint8) { QPAttr(b).SetState(v) }),
		"cur_state":          u8f(func(b []byte) uint8 { return QPAttr(b).CurState() }, func(b []byte, v uint8) { QPAttr(b).SetCurState(v) }),
		"path_mtu":           u8f(func(b []byte) uint8 { return QPAttr(b).PathMTU() }, func(b []byte, v uint8) { QPAttr(b).SetPathMTU(v) }),
		"timeout":            u8f(func(b []byte) uint8 { return QPAttr(b).Timeout() }, func(b []byte, v uint8) { QPAttr(b).SetTimeout(v) }),
		"retry_cnt":          u8f(func(b []byte) uint8 { return QPAttr(b).RetryCnt() }, func(b []byte, v uint8) { QPAttr(b).SetRetryCnt(v) }),
		"rnr_retry":          u8f(func(b []byte) uint8 { return QPAttr(b).RNRRetry() }, func(b []byte, v uint8) { QPAttr(b).SetRNRRetry(v) }),
		"min_rnr_timer":      u8f(func(b []byte) uint8 { return QPAttr(b).MinRNRTimer() }, func(b []byte, v uint8) { QPAttr(b).SetMinRNRTimer(v) }),
		"max_rd_atomic":      u8f(func(b []byte) uint8 { return QPAttr(b).MaxRdAtomic() }, func(b []byte, v uint8) { QPAttr(b).SetMaxRdAtomic(v) }),
		"max_dest_rd_atomic": u8f(func(b []byte) uint8 { return QPAttr(b).MaxDestRdAtomic() }, func(b []byte, v uint8) { QPAttr(b).SetMaxDestRdAtomic(v) }),
		"sgid_index":         u8f(func(b []byte) uint8 { return QPAttr(b).SGIDIndex() }, func(b []byte, v uint8) { QPAttr(b).SetSGIDIndex(v) }),
		"hop_limit":          u8f(func(b []byte) uint8 { return QPAttr(b).HopLimit() }, func(b []byte, v uint8) { QPAttr(b).SetHopLimit(v) }),
		"traffic_class":      u8f(func(b []byte) uint8 { return QPAttr(b).TrafficClass() }, func(b []byte, v uint8) { QPAttr(b).SetTrafficClass(v) }),
		"port_num":           u8f(func(b []byte) uint8 { return QPAttr(b).PortNum() }, func(b []byte, v uint8) { QPAttr(b).SetPortNum(v) }),
		"sq_drain_notify":    u8f(func(b []byte) uint8 { return QPAttr(b).SQDrainNotify() }, func(b []byte, v uint8) { QPAttr(b).SetSQDrainNotify(v) }),
		"pkey_index":         u16f(func(b []byte) uint16 { return QPAttr(b).PKeyIndex() }, func(b []byte, v uint16) { QPAttr(b).SetPKeyIndex(v) }),
		"access_flags":       u32f(func(b []byte) uint32 { return QPAttr(b).AccessFlags() }, func(b []byte, v uint32) { QPAttr(b).SetAccessFlags(v) }),
		"dest_qpn":           u32f(func(b []byte) uint32 { return QPAttr(b).DestQPN() }, func(b []byte, v uint32) { QPAttr(b).SetDestQPN(v) }),
		"rq_psn":             u32f(func(b []byte) uint32 { return QPAttr(b).RQPSN() }, func(b []byte, v uint32) { QPAttr(b).SetRQPSN(v) }),
		"sq_psn":             u32f(func(b []byte) uint32 { return QPAttr(b).SQPSN() }, func(b []byte, v uint32) { QPAttr(b).SetSQPSN(v) }),
		"flow_label":         u32f(func(b []byte) uint32 { return QPAttr(b).FlowLabel() }, func(b []byte, v uint32) { QPAttr(b).SetFlowLabel(v) }),
		"dgid":               bytesf(func(b []byte) []byte { return QPAttr(b).DGID() }),
		"dmac":               bytesf(func(b []byte) []byte { return QPAttr(b).DMAC() }),
		"max_send_wr":        u32f(func(b []byte) uint32 { return QPAttr(b).MaxSendWR() }, func(b []byte, v uint32) { QPAttr(b).SetMaxSendWR(v) }),
		"max_recv_wr":        u32f(func(b []byte) uint32 { return QPAttr(b).MaxRecvWR() }, func(b []byte, v uint32) { QPAttr(b).SetMaxRecvWR(v) }),
		"max_send_sge":       u16f(func(b []byte) uint16 { return QPAttr(b).MaxSendSGE() }, func(b []byte, v uint16) { QPAttr(b).SetMaxSendSGE(v) }),
		"max_recv_sge":       u16f(func(b []byte) uint16 { return QPAttr(b).MaxRecvSGE() }, func(b []byte, v uint16) { QPAttr(b).SetMaxRecvSGE(v) }),
		"max_inline":         u32f(func(b []byte) uint32 { return QPAttr(b).MaxInline() }, func(b []byte, v uint32) { QPAttr(b).SetMaxInline(v) }),
		"qkey":               u32f(func(b []byte) uint32 { return QPAttr(b).QKey() }, func(b []byte, v uint32) { QPAttr(b).SetQKey(v) }),
	},
	"reg_dma_args": {
		"pd":     u32f(func(b []byte) uint32 { return RegDMAArgs(b).PD() }, func(b []byte, v uint32) { RegDMAArgs(b).SetPD(v) }),
		"access": u32f(func(b []byte) uint32 { return RegDMAArgs(b).Access() }, func(b []byte, v uint32) { RegDMAArgs(b).SetAccess(v) }),
	},
	"mcast_args": {
		"qpn": u32f(func(b []byte) uint32 { return McastArgs(b).QPN() }, func(b []byte, v uint32) { McastArgs(b).SetQPN(v) }),
		"gid": bytesf(func(b []byte) []byte { return McastArgs(b).GID() }),
	},
	"eth_ring_args": {
		"kind":   u8f(func(b []byte) uint8 { return EthRingArgs(b).Kind() }, func(b []byte, v uint8) { EthRingArgs(b).SetKind(v) }),
		"vector": u16f(func(b []byte) uint16 { return EthRingArgs(b).Vector() }, func(b []byte, v uint16) { EthRingArgs(b).SetVector(v) }),
		"flags":  u32f(func(b []byte) uint32 { return EthRingArgs(b).Flags() }, func(b []byte, v uint32) { EthRingArgs(b).SetFlags(v) }),
		"queue":  bytesf(func(b []byte) []byte { return EthRingArgs(b).Queue() }),
	},
}

// Every view reads and writes each field at the offset and width Layouts gives it (and so the
// generated C header), little-endian, touching no other byte; every field of a viewed layout
// has its accessor.
func TestViewsMatchLayouts(t *testing.T) {
	var v uint64 = 0x8877665544332211
	for _, l := range Layouts {
		fields, ok := viewAccessors[l.Name]
		if !ok {
			continue
		}
		for _, f := range l.Fields {
			a, ok := fields[f.Name]
			if !ok {
				t.Errorf("%s.%s has no view accessor", l.Name, f.Name)
				continue
			}
			b := make([]byte, l.Size)
			a.set(b, v)
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
			if got, wantV := a.get(b), v&(1<<(8*min(f.Size, 8))-1); !f.Array && got != wantV {
				t.Errorf("%s.%s reads 0x%x, want 0x%x", l.Name, f.Name, got, wantV)
			}
		}
	}
	for name := range viewAccessors {
		found := false
		for _, l := range Layouts {
			found = found || l.Name == name
		}
		if !found {
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
		{"create_qp", e.CreateQPArgs(), CreateQPArgsSize}, {"modify_qp", e.ModifyQPArgs(), ModifyQPArgsSize},
		{"query_qp", e.QueryQPArgs(), QueryQPArgsSize}, {"create_srq", e.CreateSRQArgs(), CreateSRQArgsSize},
		{"modify_srq", e.ModifySRQArgs(), ModifySRQArgsSize}, {"eth_ring", e.EthRingArgs(), EthRingArgsSize},
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
