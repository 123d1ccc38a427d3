package rdmacm

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
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

// TestAgentAHOnceForTwoAskingAtOnce: two goroutines that ask for QP1's handle to one peer at
// once get the same handle, made once, and it is the one kept.
func TestAgentAHOnceForTwoAskingAtOnce(t *testing.T) {
	n := newHostileNet(t)
	a, dst := n.a.agent, n.devH.IP()
	var makes atomic.Int32
	making, release := make(chan struct{}), make(chan struct{})
	a.mu.Lock()
	a.testHookMakeAH = func() {
		if makes.Add(1) == 1 {
			close(making)
			<-release
		}
	}
	a.mu.Unlock()
	var got [2]*engine.AH
	var errs [2]error
	var wg sync.WaitGroup
	wg.Go(func() { got[0], errs[0] = a.ah(dst) })
	<-making
	wg.Go(func() { got[1], errs[1] = a.ah(dst) })
	// The first is making the handle: wait until the second has asked too, waiting for it or
	// making one of its own.
	deadline := time.Now().Add(time.Minute)
	for a.ahWaiters(dst) == 0 && makes.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the second caller never asked")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	a.mu.Lock()
	kept := a.ahs[dst]
	a.mu.Unlock()
	if errs[0] != nil || errs[1] != nil || got[0] != got[1] || got[0] != kept || makes.Load() != 1 {
		t.Fatalf("handles %p %p (kept %p), errors %v %v, made %d times", got[0], got[1], kept, errs[0], errs[1], makes.Load())
	}
}
