// Package faultplan is targeted faults for RoCE frames: which frames (by sending device,
// opcode, destination QP and PSN; the Nth match, or every match up to a count; within a time
// window) and what happens to them (dropped, duplicated, corrupted, delayed), or a device's link
// down for a while. The simulator's fabric runs them on virtual time, serve's in-process fabric
// on the wall clock (Live); serve and `softirdma fault` read them in a one-line syntax (Parse).
package faultplan

import (
	"encoding/binary"
	"fmt"
	"time"

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

func (a Action) String() string {
	if int(a) < len(actionNames) && a != 0 {
		return actionNames[a]
	}
	return fmt.Sprintf("action %d", uint8(a))
}

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

// ParseFrame reads an Ethernet frame's BTH (after IPv4 or IPv6 and UDP, a VLAN tag allowed).
// Anything else gives a Frame that is not OK, which no fault matches.
func ParseFrame(b []byte) Frame {
	var fr Frame
	off := 12
	if len(b) >= 14 && binary.BigEndian.Uint16(b[12:]) == roce.EtherTypeVLAN {
		off = 16
	}
	if len(b) < off+2 {
		return fr
	}
	var bth int
	switch binary.BigEndian.Uint16(b[off:]) {
	case roce.EtherTypeIPv4:
		bth = off + 2 + roce.IPv4Len + roce.UDPLen
	case roce.EtherTypeIPv6:
		bth = off + 2 + roce.IPv6Len + roce.UDPLen
	default:
		return fr
	}
	if len(b) < bth+roce.BTHLen {
		return fr
	}
	h := roce.BTH(b[bth : bth+roce.BTHLen])
	fr.Op, fr.DestQP, fr.PSN, fr.OK = h.Opcode(), h.DestQP(), h.PSN(), true
	if info := fr.Op.Info(); info != nil && info.HasPayload() {
		fr.PayloadOff = bth + roce.BTHLen + info.Ext.Len()
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
