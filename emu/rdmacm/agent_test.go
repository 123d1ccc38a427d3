package rdmacm

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/cm"
)

// TestAgentReceiveNotPostedAgainCounted: a receive buffer QP1 refuses to take back is not lost
// silently: Stats.RecvLost counts it and the logger hears of it.
func TestAgentReceiveNotPostedAgainCounted(t *testing.T) {
	n := newHostileNet(t)
	var log bytes.Buffer
	n.a.agent.log = slog.New(slog.NewTextHandler(&log, nil))
	n.raw(cmMAD(1, cm.AttrREQ, request(cm.AttrREQ, cm.ServiceID(cm.PSTCP, 7174), 100)))
	// The MAD's completion is queued, not yet taken: QP1 goes to RESET, where it takes no
	// receive.
	if !n.sim.RunUntil(n.a.agent.polling.Load) {
		t.Fatal("no MAD came")
	}
	hmust(t, n.a.agent.qp.Modify(engine.QPAttr{State: engine.QPSReset}, engine.AttrState))
	n.sim.RunFor(time.Millisecond)
	if st := n.a.Stats(); st.RecvLost != 1 || st.Received != 1 || len(n.waiting) != 1 {
		t.Fatalf("stats %+v, %d requests wait", st, len(n.waiting))
	}
	if got := log.String(); !strings.Contains(got, "a receive buffer of QP1 could not be posted again") || !strings.Contains(got, "RESET") {
		t.Fatalf("log %q", got)
	}
}
