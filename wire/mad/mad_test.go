package mad

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// A CM REQ as Linux's cm.c sends one: base version 1, class 7 version 2, method Send, the
// transaction ID, attribute REQ.
func TestParseCMREQ(t *testing.T) {
	b := make([]byte, Len)
	b[0], b[1], b[2], b[3] = 1, 0x07, 2, 0x03
	binary.BigEndian.PutUint64(b[8:], 0x0000_1234_5678_9abc)
	binary.BigEndian.PutUint16(b[16:], CMREQ)
	h, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Header{BaseVersion: 1, MgmtClass: ClassCM, ClassVersion: 2, Method: MethodSend, TID: 0x123456789abc, AttrID: CMREQ}
	if h != want || h.String() != "CM/REQ Send" {
		t.Fatalf("%+v %q", h, h.String())
	}
	if _, err := Parse(b[:HeaderLen-1]); err != ErrShort {
		t.Fatalf("short: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct {
		h    Header
		want string
	}{
		{Header{MgmtClass: ClassSubnAdm, AttrID: 0x0035, Method: MethodGetResp}, "SA/0x0035 GetResp"},
		{Header{MgmtClass: ClassPerf, AttrID: CMClassPortInfo, Method: MethodGet}, "PerfMgt/ClassPortInfo Get"},
		{Header{MgmtClass: 0x33, AttrID: 0x10, Method: 0x42}, "Vendor(0x33)/0x0010 0x42"},
		{Header{MgmtClass: 0x99, AttrID: CMREP, Method: MethodSend}, "0x99/0x0013 Send"},
		{Header{MgmtClass: ClassCM, AttrID: CMSIDRREP, Method: MethodSend}, "CM/SIDR_REP Send"},
	} {
		if got := c.h.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.h, got, c.want)
		}
	}
}

// FuzzParse: any bytes give a header or ErrShort, never a panic, and the header holds the bytes
// at their offsets.
func FuzzParse(f *testing.F) {
	req := make([]byte, Len)
	req[0], req[1], req[2], req[3], req[17] = 1, 7, 2, 3, 0x10
	f.Add(req)
	f.Add([]byte{})
	f.Add(make([]byte, HeaderLen-1))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Parse(b)
		if len(b) < HeaderLen {
			if err != ErrShort {
				t.Fatalf("%d bytes: %v", len(b), err)
			}
			return
		}
		if err != nil || uint8(h.MgmtClass) != b[1] || uint8(h.Method) != b[3] || h.AttrID != binary.BigEndian.Uint16(b[16:]) ||
			h.TID != binary.BigEndian.Uint64(b[8:]) || h.AttrModifier != binary.BigEndian.Uint32(b[20:]) {
			t.Fatalf("% x: %+v %v", b[:HeaderLen], h, err)
		}
		_ = h.String()
		// Written back, the header is the bytes it was read from, but for the reserved field.
		out := make([]byte, HeaderLen)
		if err := h.Put(out); err != nil {
			t.Fatal(err)
		}
		in := bytes.Clone(b[:HeaderLen])
		in[18], in[19] = 0, 0
		if !bytes.Equal(out, in) {
			t.Fatalf("% x written as % x", in, out)
		}
	})
}

// TestPut: the header Parse reads writes back to the same bytes, the reserved field zero, and
// the bytes after the header are left alone.
func TestPut(t *testing.T) {
	h := Header{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: 2, Method: MethodSend, Status: 0x0102,
		ClassSpecific: 0x0304, TID: 0x0506_0708_090a_0b0c, AttrID: CMREP, AttrModifier: 0x0d0e0f10}
	b := make([]byte, Len)
	for i := range b {
		b[i] = 0xee
	}
	if err := h.Put(b); err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 7, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 0x13, 0, 0, 0x0d, 0x0e, 0x0f, 0x10, 0xee}
	if !bytes.Equal(b[:HeaderLen+1], want) {
		t.Fatalf("% x", b[:HeaderLen+1])
	}
	if g, err := Parse(b); err != nil || g != h {
		t.Fatalf("%+v %v", g, err)
	}
	if err := h.Put(b[:HeaderLen-1]); err == nil || err.Error() != "mad: 23 bytes for the 24-byte common header" {
		t.Fatalf("short: %v", err)
	}
}
