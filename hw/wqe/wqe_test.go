package wqe

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/hw/abi"
)

func sendWQE(opcode, flags uint32) abi.SendWQE {
	e := abi.SendWQE(make([]byte, abi.SendSGEs+4*abi.SGESize))
	binary.LittleEndian.PutUint64(e[abi.SendWRID:], 7)
	binary.LittleEndian.PutUint32(e[abi.SendOpcode:], opcode)
	binary.LittleEndian.PutUint32(e[abi.SendFlags:], flags)
	return e
}

// TestDecodeThen: what each opcode needs after Decode, and the opcodes refused whole.
func TestDecodeThen(t *testing.T) {
	for _, c := range []struct {
		op   engine.WROpcode
		then Then
	}{
		{engine.WRRDMAWrite, Payload}, {engine.WRRDMAWriteWithImm, Payload}, {engine.WRRDMARead, Payload},
		{engine.WRAtomicCmpAndSwp, Payload}, {engine.WRAtomicFetchAndAdd, Payload}, {engine.WRLocalInv, Payload},
		{engine.WRSend, Address}, {engine.WRSendWithImm, Address}, {engine.WRSendWithInv, Address},
		{engine.WRFlush, Post}, {engine.WRAtomicWrite, Post}, {engine.WRBindMW, Bind}, {engine.WRRegMR, RegMR},
	} {
		wr, then, err := Decode(sendWQE(uint32(c.op), 0))
		if err != nil || then != c.then || wr.Opcode != c.op || wr.ID != 7 {
			t.Errorf("opcode %d: %+v then %d, %v; want then %d", c.op, wr, then, err, c.then)
		}
	}
	for _, op := range []uint32{0x100 | uint32(engine.WRSend), 200} {
		if _, _, err := Decode(sendWQE(op, 0)); !errors.Is(err, syscall.EOPNOTSUPP) {
			t.Errorf("opcode %#x: %v, want EOPNOTSUPP", op, err)
		}
	}
}

// TestReadPayloadBounds: SGEs and inline data past what the QP takes, or the slot holds, are
// EINVAL.
func TestReadPayloadBounds(t *testing.T) {
	e := sendWQE(uint32(engine.WRSend), 0)
	binary.LittleEndian.PutUint32(e[abi.SendDMANumSGE:], 3)
	wr, _, _ := Decode(e)
	if err := ReadPayload(e, &wr, 0, 2); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("3 SGEs on a QP of 2: %v", err)
	}
	binary.LittleEndian.PutUint32(e[abi.SendDMANumSGE:], 5)
	if err := ReadPayload(e, &wr, 0, 8); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("5 SGEs in a slot of 4: %v", err)
	}
	e = sendWQE(uint32(engine.WRSend), uint32(engine.SendInline))
	binary.LittleEndian.PutUint32(e[abi.SendDMALength:], 65)
	wr, _, _ = Decode(e)
	if err := ReadPayload(e, &wr, 64, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("65 bytes inline on a QP of 64: %v", err)
	}
}

// FuzzDecode: whatever a queue's writer puts in a send or receive WQE, decoding it neither
// panics nor reads past the slot, and what it takes stays within the QP's limits.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(sendWQE(uint32(engine.WRSend), 0)), 4, 64)
	f.Add([]byte(sendWQE(uint32(engine.WRAtomicWrite), 0)), 1, 0)
	f.Fuzz(func(t *testing.T, b []byte, maxSGE, maxInline int) {
		if len(b) < abi.SendSGEs || maxSGE < 0 || maxSGE > 64 || maxInline < 0 || maxInline > 4096 {
			return
		}
		e := abi.SendWQE(b)
		wr, then, err := Decode(e)
		if err == nil && (then == Payload || then == Address) {
			if ReadPayload(e, &wr, maxInline, maxSGE) == nil && (len(wr.SGL) > maxSGE || len(wr.InlineData) > maxInline) {
				t.Fatalf("took %d SGEs and %d inline bytes past %d and %d", len(wr.SGL), len(wr.InlineData), maxSGE, maxInline)
			}
		}
		if len(b) >= abi.RecvSGEs {
			r := Recv(abi.RecvWQE(b), maxSGE)
			if r.Err == nil && len(r.SGL) > maxSGE {
				t.Fatalf("a receive of %d SGEs past %d", len(r.SGL), maxSGE)
			}
		}
	})
}
