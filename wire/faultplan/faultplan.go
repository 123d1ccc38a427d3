// Package faultplan is targeted faults for RoCE frames: which frames (by sending device,
// opcode, destination QP and PSN; the Nth match, or every match up to a count; within a time
// window) and what happens to them (dropped, duplicated, corrupted, delayed), or a device's link
// down for a while. The simulator's fabric runs them on virtual time, serve's in-process fabric
// on the wall clock (Live); serve and `softirdma fault` read them in a one-line syntax (Parse).
package faultplan

import (
	"time"

	"github.com/softirdma/softirdma/internal/names"
	"github.com/softirdma/softirdma/wire/roce"
)

// Action is what a fault does to the frames it matches.
type Action uint8

const (
	Drop Action = iota + 1
	Duplicate
	Corrupt
	Delay
	// Flap takes the sending device's link down for the fault's window: nothing it sends or is
	// sent gets through. serve's fabric has it; the simulator's fabric takes a link down with
	// LinkDown.
	Flap
)

var actionNames = [...]string{"", "drop", "duplicate", "corrupt", "delay", "flap"}

func (a Action) String() string { return names.In(actionNames[:], a, "action %d") }

// Fault is a targeted fault: it matches frames by sender, opcode, destination QP and PSN, and
// fires on the Nth match, or on every match (at most Count times), within a time window.
type Fault struct {
	Name    string
	Src     string        // sending device's name; "" for any
	Opcodes []roce.Opcode // empty for any
	DestQP  uint32        // 0 for any
	// MatchPSN makes the fault match only frames with PSN PSN.
	MatchPSN bool
	PSN      uint32
	Nth      int           // fire on the Nth matching frame (1-based); 0 fires on every match
	Count    int           // with Nth 0: fire at most Count times (0: no limit)
	From     time.Duration // active from this time
	Until    time.Duration // until this time; 0 for ever
	Action   Action
	Delay    time.Duration // for Delay

	seen, fired int
}

// Match says whether the fault fires on a frame src sent, at time now (the clock its windows
// count on), and counts the match. The caller does what Action says and calls Fire.
func (f *Fault) Match(src string, fr *Frame, now time.Duration) bool {
	if !fr.OK || now < f.From || (f.Until != 0 && now >= f.Until) {
		return false
	}
	if f.Src != "" && f.Src != src || f.DestQP != 0 && f.DestQP != fr.DestQP || f.MatchPSN && f.PSN != fr.PSN {
		return false
	}
	if len(f.Opcodes) > 0 {
		hit := false
		for _, op := range f.Opcodes {
			hit = hit || op == fr.Op
		}
		if !hit {
			return false
		}
	}
	f.seen++
	switch {
	case f.Nth > 0:
		return f.seen == f.Nth
	case f.Count > 0:
		return f.fired < f.Count
	}
	return true
}

// Fire counts a firing.
func (f *Fault) Fire() { f.fired++ }

// Take shows the fault a frame src sent at time now, as the faults before it left it: copies of
// it go on (0: an earlier fault dropped it) after delay. A fault that matches the frame counts it
// as seen; one that fires on it does what its Action says, counts it as fired and reports true.
// A frame already dropped is seen but not fired on: fired counts only frames the fault changed,
// dropped, duplicated or delayed, so that it says what the fault did to the traffic.
func (f *Fault) Take(src string, fr *Frame, frame []byte, now time.Duration, copies int, delay time.Duration) (int, time.Duration, bool) {
	if !f.Match(src, fr, now) || copies == 0 {
		return copies, delay, false
	}
	f.Fire()
	copies, delay = f.Apply(frame, fr, copies, delay)
	return copies, delay, true
}

// Apply does what a drop, duplicate, corrupt or delay fault does to a frame it fired on: the
// copies that go on and their delay, as they stand after the faults before it; a corruption
// changes frame in place.
func (f *Fault) Apply(frame []byte, fr *Frame, copies int, delay time.Duration) (int, time.Duration) {
	switch f.Action {
	case Drop:
		copies = 0
	case Duplicate:
		copies++
	case Corrupt:
		CorruptFrame(frame, fr.PayloadOff)
	case Delay:
		delay += f.Delay
	}
	return copies, delay
}

// ChangesFrames says whether the fault changes the frames it fires on (a corruption), so that a
// frame it fired on is no longer as its sender sealed it.
func (f *Fault) ChangesFrames() bool { return f.Action == Corrupt }

// Fired is how many times the fault fired.
func (f *Fault) Fired() int { return f.fired }

// Seen is how many frames matched the fault's sender, opcode, QP and PSN in its window.
func (f *Fault) Seen() int { return f.seen }

// Frame is what faults match on, read from a RoCEv2 frame without the full parser.
type Frame struct {
	Op         roce.Opcode
	DestQP     uint32
	PSN        uint32
	PayloadOff int  // where the payload starts, 0 for a packet without one
	OK         bool // a RoCEv2 frame with a whole BTH
}

// ParseFrame reads a RoCEv2 frame's BTH: a frame a receiver would take for RoCEv2 by its headers
// (Ethernet with up to two VLAN tags, IPv4 or IPv6, UDP to port 4791, a BTH and the extension
// headers of its opcode, lengths that agree), whatever its ICRC. Anything else (ARP, TCP, UDP to
// another port, a fragment, a truncated frame) gives a Frame that is not OK, which no fault
// matches: the bytes where a BTH would be in a TCP segment are not an opcode.
func ParseFrame(b []byte) Frame {
	var fr Frame
	var f roce.Frame
	var p roce.Parser
	if p.ParseHeaders(&f, b) != nil {
		return fr
	}
	fr.Op, fr.DestQP, fr.PSN, fr.OK = f.Opcode, f.BTH.DestQP(), f.BTH.PSN(), true
	if f.Info.HasPayload() {
		fr.PayloadOff = f.BTHOff + roce.BTHLen + f.Info.Ext.Len()
	}
	return fr
}

// CorruptFrame flips one bit of a frame, in its payload if it has one, else in its last header
// bytes, after the ICRC was computed: the receiver drops it by its ICRC.
func CorruptFrame(b []byte, payloadOff int) {
	i := payloadOff
	if i <= 0 || i >= len(b)-4 {
		i = len(b) - 8 // inside the BTH or an extension header of a headers-only packet
	}
	if i >= 0 && i < len(b) {
		b[i] ^= 0x01
	}
}
