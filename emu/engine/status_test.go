package engine

import (
	"fmt"
	"testing"

	"github.com/softirdma/softirdma/keys"
)

// TestWCStatusOfAccessErrors checks that each status the key space reports for a failed check
// becomes, by number, the completion status of the same libibverbs name.
func TestWCStatusOfAccessErrors(t *testing.T) {
	for _, c := range []struct {
		ks   keys.Status
		want WCStatus
	}{
		{keys.StatusLocQPOpErr, WCLocQPOpErr},
		{keys.StatusLocProtErr, WCLocProtErr},
		{keys.StatusMWBindErr, WCMWBindErr},
		{keys.StatusRemInvReqErr, WCRemInvReqErr},
		{keys.StatusRemAccessErr, WCRemAccessErr},
	} {
		if got := WCStatus(c.ks); got != c.want || got.String() != c.ks.String() {
			t.Errorf("keys %s (%d) is %s (%d), want %s", c.ks, uint8(c.ks), got, uint8(got), c.want)
		}
	}
	// The numbers of enum ibv_wc_status the engine reports on its own.
	for s, want := range map[WCStatus]uint8{WCSuccess: 0, WCLocLenErr: 1, WCWRFlushErr: 5, WCBadRespErr: 7,
		WCRemOpErr: 11, WCRetryExcErr: 12, WCRNRRetryExcErr: 13, WCFatalErr: 19, WCGeneralErr: 21, WCTMRndvIncomplete: 23} {
		if uint8(s) != want {
			t.Errorf("%s is %d, want %d", s, uint8(s), want)
		}
	}
}

// The completer is a table of named states: every state before DONE has a step and a name.
func TestCompleterStates(t *testing.T) {
	for st := compGetAck; st < compDone; st++ {
		if completerSteps[st] == nil {
			t.Errorf("state %s has no step", st)
		}
		if st.String() == "" || st.String() == fmt.Sprintf("state %d", uint8(st)) {
			t.Errorf("state %d has no name", st)
		}
	}
	if compDone.String() != "DONE" {
		t.Errorf("DONE is %q", compDone)
	}
}
