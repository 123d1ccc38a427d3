package roce

import (
	"math/bits"
	"testing"
)

// TestOpcodeFlags checks every opcode's meaning flags against the IBTA opcode list (IBTA 9.2,
// table 38; FLUSH and ATOMIC_WRITE from the 1.5 memory placement extensions; CNP from RoCEv2
// annex A17). The expected flags are written out here, not derived as the table does.
func TestOpcodeFlags(t *testing.T) {
	const (
		send    = FlagSend
		write   = FlagWrite
		start   = FlagStart
		end     = FlagEnd
		only    = FlagStart | FlagEnd
		imm     = FlagImm
		inv     = FlagInv
		recv    = FlagNeedsRecv
		comp    = FlagCompletes
		resp    = FlagResponse
		rdResp  = FlagReadResponse | FlagResponse
		reqOnly = only
	)
	sendWrite := []struct {
		low   Opcode
		name  string
		flags Flags
	}{
		{0x00, "SEND_FIRST", send | start | recv},
		{0x01, "SEND_MIDDLE", send},
		{0x02, "SEND_LAST", send | end | comp},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", send | end | imm | comp},
		{0x04, "SEND_ONLY", send | only | recv | comp},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", send | only | imm | recv | comp},
		{0x06, "RDMA_WRITE_FIRST", write | start},
		{0x07, "RDMA_WRITE_MIDDLE", write},
		{0x08, "RDMA_WRITE_LAST", write | end},
		{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", write | end | imm | recv | comp},
		{0x0A, "RDMA_WRITE_ONLY", write | only},
		{0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", write | only | imm | recv | comp},
	}
	want := map[Opcode]Flags{
		RCReadRequest:        FlagRead | reqOnly,
		RCReadResponseFirst:  rdResp | start,
		RCReadResponseMiddle: rdResp,
		RCReadResponseLast:   rdResp | end,
		RCReadResponseOnly:   rdResp | only,
		RCAcknowledge:        FlagAck | resp | only,
		RCAtomicAcknowledge:  FlagAck | resp | only,
		RCCompareSwap:        FlagAtomic | reqOnly,
		RCFetchAdd:           FlagAtomic | reqOnly,
		RCSendLastInv:        send | end | inv | comp,
		RCSendOnlyInv:        send | only | inv | recv | comp,
		RCFlush:              FlagFlush | reqOnly,
		RCAtomicWrite:        FlagAtomicWrite | reqOnly,
		UDSendOnly:           send | only | recv | comp,
		UDSendOnlyImm:        send | only | imm | recv | comp,
		CNP:                  FlagCNP | only,
	}
	names := map[Opcode]string{}
	for _, base := range []struct {
		op  Opcode
		pfx string
	}{{0x00, "RC_"}, {0x20, "UC_"}} {
		for _, e := range sendWrite {
			want[base.op+e.low] = e.flags
			names[base.op+e.low] = base.pfx + e.name
		}
	}
	// The RC opcodes 0x00-0x1D that IBTA leaves reserved (0x15 was RESYNC) are unknown.
	for _, op := range []Opcode{0x15, 0x18, 0x19, 0x1A, 0x1B} {
		want[op] = 0
	}
	for i := 0; i < opcodeTableLen; i++ {
		op := Opcode(i)
		w, listed := want[op]
		info := op.Info()
		if !listed {
			if info != nil {
				t.Errorf("%s: in the table but not in the IBTA list", op)
			}
			continue
		}
		if w == 0 {
			if info != nil || op.Is(^Flags(0)) {
				t.Errorf("%s: in the table, IBTA reserves it", op)
			}
			continue
		}
		if info == nil {
			t.Errorf("opcode 0x%02x: missing", uint8(op))
			continue
		}
		if n, ok := names[op]; ok && info.Name != n {
			t.Errorf("opcode 0x%02x: name %s, want %s", uint8(op), info.Name, n)
		}
		if info.Flags != w {
			t.Errorf("%s: flags 0x%x, want 0x%x", op, info.Flags, w)
		}
	}
}

// TestOpcodeFlagsAgree checks that the flags agree with the rest of each entry: the class, the
// extension headers and the Response field.
func TestOpcodeFlagsAgree(t *testing.T) {
	for _, op := range Opcodes() {
		info := op.Info()
		has := func(f Flags) bool {
			if info.Is(f) != op.Is(f) {
				t.Errorf("%s: OpcodeInfo.Is and Opcode.Is disagree on 0x%x", op, f)
			}
			return op.Is(f)
		}
		if n := bits.OnesCount32(uint32(info.Flags & opFlags)); n != 1 {
			t.Errorf("%s: %d operation flags, want 1", op, n)
		}
		if op.Has(^Ext(0)) != (info.Ext != 0) {
			t.Errorf("%s: Has disagrees with the entry's headers %b", op, info.Ext)
		}
		checks := []struct {
			what     string
			got, exp bool
		}{
			{"immediate", has(FlagImm), info.Ext&ExtImmDt != 0},
			{"invalidate", has(FlagInv), info.Ext&ExtIETH != 0},
			{"start", has(FlagStart), info.Class == First || info.Class == Only},
			{"end", has(FlagEnd), info.Class == Last || info.Class == Only},
			{"response", has(FlagResponse), info.Response},
			{"response opcode", has(FlagResponse), has(FlagReadResponse | FlagAck)},
			{"RETH", info.Ext&ExtRETH != 0, (has(FlagWrite) && has(FlagStart)) || has(FlagRead|FlagFlush|FlagAtomicWrite)},
			{"AtomicETH", info.Ext&ExtAtomicETH != 0, has(FlagAtomic)},
			{"AETH", info.Ext&ExtAETH != 0, has(FlagAck) || (has(FlagReadResponse) && info.Class != Middle)},
			{"receive at start", has(FlagNeedsRecv), (has(FlagSend) && has(FlagStart)) || (has(FlagWrite) && has(FlagImm))},
			{"receive completion", has(FlagCompletes), (has(FlagSend) && has(FlagEnd)) || (has(FlagWrite) && has(FlagImm))},
		}
		for _, c := range checks {
			if c.got != c.exp {
				t.Errorf("%s: %s flag %v, the entry says %v", op, c.what, c.got, c.exp)
			}
		}
	}
	for op := 0; op < opcodeTableLen; op++ {
		if !Opcode(op).Known() && Opcode(op).Is(^Flags(0)) {
			t.Errorf("%s: unknown but has flags", Opcode(op))
		}
	}
}

// The parser walks the extension headers by their bits, lowest first: extOrder must list them in
// bit order, which is also their order on the wire.
func TestExtOrderIsBitOrder(t *testing.T) {
	for i, x := range extOrder {
		if x.ext != 1<<i {
			t.Fatalf("extOrder[%d] is %#x, want bit %d", i, x.ext, i)
		}
	}
}
