package hw

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
)

// modBench is a CQ on a completion EQ (vector 3) whose completions a peer's SENDs make, one
// receive at a time, for the moderation tests.
type modBench struct {
	*bench
	cqn, slot uint32
	qp        *emu.QP         // the receiving QP, on the CQ
	receive   func(id uint64) // a SEND lands on the CQ; the simulator runs until its CQE is written and announced
}

func newModBench(t *testing.T) *modBench {
	b := newBench(t)
	b.enable()
	cqn, slot := b.cqOnEQ()
	c := b.f.cqs[cqn]
	qp, peer, sgl := b.pairOnCQ(c, 64)
	m := &modBench{bench: b, cqn: cqn, slot: slot, qp: qp}
	m.receive = func(id uint64) {
		t.Helper()
		before := c.written
		must(t, qp.PostRecv(emu.RecvWR{ID: id, SGL: sgl}))
		must(t, peer.PostSend(emu.SendWR{ID: id, Opcode: emu.WRSend, SGL: sgl}))
		if !b.sim.RunUntil(func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.written > before }) {
			t.Fatalf("receive %d never completed", id)
		}
		// What is due now, the completion's hook among it (it runs once the engine's locks are
		// released, on the clock), but no later timer.
		b.sim.RunFor(0)
	}
	return m
}

func (m *modBench) moderate(count, period uint16) syscall.Errno {
	a := make([]byte, abi.ModifyCQArgsSize)
	args := abi.ModifyCQArgs(a)
	args.SetNum(m.cqn)
	args.SetCount(count)
	args.SetPeriod(period)
	errno, _ := m.cmd(abi.OpModifyCQ, a)
	return errno
}

// rearm has the driver take what came, set the moderation and arm the CQ again.
func (m *modBench) rearm(count, period uint16) {
	m.t.Helper()
	m.consume()
	if errno := m.moderate(count, period); errno != 0 {
		m.t.Fatalf("modify_cq %d %d: %v", count, period, errno)
	}
	m.setArm(m.slot, abi.ArmNext)
}

// events is the completion EQ's producer index: the events the CQ announced.
func (m *modBench) events() uint32 {
	return binary.LittleEndian.Uint32(m.at(0x120000 + abi.QHProducer))
}

func (m *modBench) wantEvents(want uint32, when string) {
	m.t.Helper()
	if got := m.events(); got != want {
		m.t.Fatalf("%d events %s, want %d", got, when, want)
	}
}

// consume has the driver take every event and CQE so far, as it does before it arms again.
func (m *modBench) consume() {
	binary.LittleEndian.PutUint32(m.at(0x120000+abi.QHConsumer), m.events())
	binary.LittleEndian.PutUint32(m.at(0x140000+abi.QHConsumer), binary.LittleEndian.Uint32(m.at(0x140000+abi.QHProducer)))
}

// With a count, an armed CQ that fires announces its event once that many completions have
// been written since it fired, the one that fired it included: one interrupt for the lot.
func TestCQModerationCount(t *testing.T) {
	m := newModBench(t)
	if errno := m.moderate(4, 0); errno != 0 {
		t.Fatalf("modify_cq: %v", errno)
	}
	m.setArm(m.slot, abi.ArmNext)
	m.mu.Lock()
	m.irqs = nil
	m.mu.Unlock()
	for id := uint64(1); id <= 3; id++ {
		m.receive(id)
		m.wantEvents(0, "after fewer completions than the count")
	}
	if m.sawVector(3) {
		t.Fatal("an interrupt before the count was reached")
	}
	m.receive(4)
	m.wantEvents(1, "once the count was reached")
	if !m.sawVector(3) {
		t.Fatal("no interrupt once the count was reached")
	}
	// Completions with the CQ not armed again announce nothing, however many.
	for id := uint64(5); id <= 12; id++ {
		m.receive(id)
	}
	m.sim.RunUntilIdle(0)
	m.wantEvents(1, "with the CQ not armed again")
}

// With a period, a held event goes out once the period has passed since the completion that
// fired the CQ, even though the count was not reached; not a microsecond earlier.
func TestCQModerationPeriod(t *testing.T) {
	m := newModBench(t)
	if errno := m.moderate(16, 100); errno != 0 {
		t.Fatalf("modify_cq: %v", errno)
	}
	m.setArm(m.slot, abi.ArmNext)
	m.receive(1)
	fired := m.sim.Now()
	m.receive(2)
	m.wantEvents(0, "within the period")
	if !m.sim.RunUntil(func() bool { return m.events() == 1 }) {
		t.Fatal("the period passed and no event came")
	}
	if waited := m.sim.Now() - fired; waited < 100*time.Microsecond || waited > 110*time.Microsecond {
		t.Fatalf("the event came %v after the completion that fired the CQ, want 100us", waited)
	}
	// Armed again: the count, reached first, sends the event and the period's timer does not
	// send a second one.
	m.rearm(2, 100)
	m.receive(3)
	m.receive(4)
	m.wantEvents(2, "once the count was reached within the period")
	m.sim.RunFor(time.Millisecond)
	m.wantEvents(2, "after the period of an event already sent")
}

// Count 0 or 1 and period 0 (a new CQ's setting, and what the driver asks to turn moderation
// off) announce at once; a new setting sends an event held under the old one now.
func TestCQModerationOffAndChanged(t *testing.T) {
	m := newModBench(t)
	m.setArm(m.slot, abi.ArmNext)
	m.receive(1)
	m.wantEvents(1, "unmoderated")
	m.rearm(1, 0)
	m.receive(2)
	m.wantEvents(2, "with count 1")
	m.rearm(8, 0)
	m.receive(3)
	m.wantEvents(2, "held for the count")
	if errno := m.moderate(0, 0); errno != 0 {
		t.Fatalf("modify_cq: %v", errno)
	}
	m.sim.RunFor(0)
	m.wantEvents(3, "once moderation was turned off")
}

// A guest's numbers are checked: a period over the bound and an unknown CQ are refused, and a
// CQ destroyed with an event held announces nothing after it is gone.
func TestCQModerationBoundsAndDestroy(t *testing.T) {
	m := newModBench(t)
	if errno := m.moderate(4, abi.CQModMaxPeriod+1); errno != syscall.EINVAL {
		t.Fatalf("period %d: %v, want EINVAL", abi.CQModMaxPeriod+1, errno)
	}
	if errno := m.moderate(abi.CQModMaxCount, abi.CQModMaxPeriod); errno != 0 {
		t.Fatalf("the largest count and period: %v", errno)
	}
	cqn := m.cqn
	m.cqn = cqn + 100
	if errno := m.moderate(4, 10); errno != syscall.ENOENT {
		t.Fatalf("an unknown CQ: %v, want ENOENT", errno)
	}
	m.cqn = cqn
	m.setArm(m.slot, abi.ArmNext)
	m.receive(1)
	m.wantEvents(0, "held")
	c := m.f.cqs[cqn]
	// The QP on the CQ goes first, as the verbs require; then the CQ, with its event held.
	must(t, m.qp.Destroy())
	m.ok(abi.OpDestroyCQ, u32s(cqn))
	m.sim.RunFor(10 * time.Millisecond)
	m.wantEvents(0, "after the CQ was destroyed")
	c.mu.Lock()
	held := c.held
	c.mu.Unlock()
	if held {
		t.Fatal("the destroyed CQ still holds an event")
	}
}
