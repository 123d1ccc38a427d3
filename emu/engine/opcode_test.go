package engine

import (
	"testing"

	"github.com/softirdma/softirdma/wire/roce"
)

// TestRequestOpcodes checks the opcodes the requester and the responder take from wire's table
// for each transport, work request and place in the message, against the IBTA names.
func TestRequestOpcodes(t *testing.T) {
	type row struct{ first, middle, last, only roce.Opcode }
	want := map[roce.Transport]map[WROpcode]row{
		roce.RC: {
			WRRDMAWrite:        {roce.RCWriteFirst, roce.RCWriteMiddle, roce.RCWriteLast, roce.RCWriteOnly},
			WRRDMAWriteWithImm: {roce.RCWriteFirst, roce.RCWriteMiddle, roce.RCWriteLastImm, roce.RCWriteOnlyImm},
			WRSend:             {roce.RCSendFirst, roce.RCSendMiddle, roce.RCSendLast, roce.RCSendOnly},
			WRSendWithImm:      {roce.RCSendFirst, roce.RCSendMiddle, roce.RCSendLastImm, roce.RCSendOnlyImm},
			WRSendWithInv:      {roce.RCSendFirst, roce.RCSendMiddle, roce.RCSendLastInv, roce.RCSendOnlyInv},
		},
		roce.UC: {
			WRRDMAWrite:        {roce.UCWriteFirst, roce.UCWriteMiddle, roce.UCWriteLast, roce.UCWriteOnly},
			WRRDMAWriteWithImm: {roce.UCWriteFirst, roce.UCWriteMiddle, roce.UCWriteLastImm, roce.UCWriteOnlyImm},
			WRSend:             {roce.UCSendFirst, roce.UCSendMiddle, roce.UCSendLast, roce.UCSendOnly},
			WRSendWithImm:      {roce.UCSendFirst, roce.UCSendMiddle, roce.UCSendLastImm, roce.UCSendOnlyImm},
		},
	}
	for tr, rows := range want {
		for wr, w := range rows {
			for _, c := range []struct {
				first, last bool
				want        roce.Opcode
			}{{true, false, w.first}, {false, false, w.middle}, {false, true, w.last}, {true, true, w.only}} {
				if got := requestOpcode(tr, wr, c.first, c.last); got != c.want {
					t.Errorf("%s %s first=%v last=%v: %s, want %s", tr, wr, c.first, c.last, got, c.want)
				}
			}
		}
	}
	// UD has ONLY packets alone.
	if got := requestOpcode(roce.UD, WRSend, true, true); got != roce.UDSendOnly {
		t.Errorf("UD SEND: %s", got)
	}
	if got := requestOpcode(roce.UD, WRSendWithImm, true, true); got != roce.UDSendOnlyImm {
		t.Errorf("UD SEND_WITH_IMM: %s", got)
	}
	for c, op := range map[roce.Class]roce.Opcode{roce.First: roce.RCReadResponseFirst, roce.Middle: roce.RCReadResponseMiddle,
		roce.Last: roce.RCReadResponseLast, roce.Only: roce.RCReadResponseOnly} {
		if got := readResponseOpcodes[c]; got != op {
			t.Errorf("READ response %s: %s, want %s", c, got, op)
		}
	}
}
