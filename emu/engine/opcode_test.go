package engine

import (
	"testing"

	"github.com/softirdma/softirdma/wire"
)

// TestRequestOpcodes checks the opcodes the requester and the responder take from wire's table
// for each work request and place in the message, against the IBTA names.
func TestRequestOpcodes(t *testing.T) {
	type row struct{ first, middle, last, only wire.Opcode }
	want := map[WROpcode]row{
		WRRDMAWrite:        {wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteOnly},
		WRRDMAWriteWithImm: {wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLastImm, wire.RCWriteOnlyImm},
		WRSend:             {wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly},
		WRSendWithImm:      {wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastImm, wire.RCSendOnlyImm},
		WRSendWithInv:      {wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastInv, wire.RCSendOnlyInv},
	}
	for wr, w := range want {
		for _, c := range []struct {
			first, last bool
			want        wire.Opcode
		}{{true, false, w.first}, {false, false, w.middle}, {false, true, w.last}, {true, true, w.only}} {
			if got := requestOpcode(wr, c.first, c.last); got != c.want {
				t.Errorf("%s first=%v last=%v: %s, want %s", wr, c.first, c.last, got, c.want)
			}
		}
	}
	for c, op := range map[wire.Class]wire.Opcode{wire.First: wire.RCReadResponseFirst, wire.Middle: wire.RCReadResponseMiddle,
		wire.Last: wire.RCReadResponseLast, wire.Only: wire.RCReadResponseOnly} {
		if got := readResponseOpcodes[c]; got != op {
			t.Errorf("READ response %s: %s, want %s", c, got, op)
		}
	}
}
