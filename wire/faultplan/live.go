package faultplan

import (
	"sync"
	"time"
)

// Live runs faults on the wall clock for a fabric whose ports are named (serve's): each frame a
// port sends is shown to it (Frame), each port that frame would reach is asked about (Down), and
// faults come and go while traffic flows (Add, Remove, List), each one's window counted from
// when it was added. Safe for concurrent use.
//
// Live numbers the frames it is shown from 1, in the order it is shown them: on a switch that
// shows it every frame before its tap writes that frame (wire/ethswitch), from the switch's
// start, the numbers are the capture's frame numbers, so List can say which frames of the capture
// a fault fired on.
type Live struct {
	mu     sync.Mutex
	next   int
	faults []*liveFault
	frame  uint64 // the number of the frame shown last
	// changed: a fault changed the frame shown last (a corruption).
	changed bool
}

type liveFault struct {
	id    int
	added time.Time
	f     Fault
	// on are the numbers of the first frames the fault fired on, at most maxFramesListed.
	on []uint64
}

// maxFramesListed bounds the frame numbers a fault keeps: a flap or a count-less fault can fire
// on every frame for as long as it stands.
const maxFramesListed = 8

// Entry is one fault of a Live plan as List reports it.
type Entry struct {
	ID          int
	Spec        string
	Seen, Fired int
	// Frames are the numbers of the first frames the fault fired on (at most 8; Fired says how
	// many there were in all).
	Frames []uint64
}

// Add adds a fault; its window starts now. It returns the fault's number.
func (l *Live) Add(f Fault) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	f.seen, f.fired = 0, 0
	l.faults = append(l.faults, &liveFault{id: l.next, added: time.Now(), f: f})
	return l.next
}

// Remove removes fault id, reporting whether there was one.
func (l *Live) Remove(id int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, lf := range l.faults {
		if lf.id == id {
			l.faults = append(l.faults[:i], l.faults[i+1:]...)
			return true
		}
	}
	return false
}

// List reports the faults in the order they were added, with how often each matched and fired.
func (l *Live) List() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Entry, len(l.faults))
	for i, lf := range l.faults {
		out[i] = Entry{ID: lf.id, Spec: lf.f.Spec(), Seen: lf.f.seen, Fired: lf.f.fired, Frames: append([]uint64(nil), lf.on...)}
	}
	return out
}

// Frames is how many frames the plan has been shown.
func (l *Live) Frames() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.frame
}

// Pass counts a frame that no fault may touch (a device's loopback, which a capture shows):
// the frames after it keep the capture's numbers.
func (l *Live) Pass() {
	l.mu.Lock()
	l.frame++
	l.mu.Unlock()
}

// Frame is a frame the port src sends: how many copies of it go on (0: it is dropped, 2: it
// is duplicated) and after how long; a corruption changes frame in place. A port whose link is
// down (a flap) sends nothing.
func (l *Live) Frame(src string, frame []byte) (copies int, delay time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frame++
	l.changed = false
	now := time.Now()
	if l.downLocked(src, now) {
		return 0, 0
	}
	copies = 1
	fr := ParseFrame(frame)
	for _, lf := range l.faults {
		if lf.f.Action == Flap {
			continue
		}
		var fired bool
		if copies, delay, fired = lf.f.Take(src, &fr, frame, now.Sub(lf.added), copies, delay); fired {
			lf.firedOn(l.frame)
			l.changed = l.changed || lf.f.ChangesFrames()
		}
	}
	if copies == 0 {
		delay = 0
	}
	return copies, delay
}

// Changed says whether a fault changed the frame Frame was shown last (a corruption): a switch
// then passes it on as any frame, its ICRC for the receiver to check (wire/ethswitch's Changer).
func (l *Live) Changed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// Down says whether port's link is down now (a flap in its window), counting the frame shown
// last, which would have reached it, as one the flap stopped. The switch asks it only for a frame
// that goes on.
func (l *Live) Down(port string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.downLocked(port, time.Now())
}

func (l *Live) downLocked(port string, now time.Time) bool {
	for _, lf := range l.faults {
		f := &lf.f
		if f.Action != Flap || f.Src != port {
			continue
		}
		if t := now.Sub(lf.added); t >= f.From && (f.Until == 0 || t < f.Until) {
			f.seen++
			f.fired++
			lf.firedOn(l.frame)
			return true
		}
	}
	return false
}

// firedOn notes that the fault fired on frame n.
func (lf *liveFault) firedOn(n uint64) {
	if len(lf.on) < maxFramesListed && (len(lf.on) == 0 || lf.on[len(lf.on)-1] != n) {
		lf.on = append(lf.on, n)
	}
}
