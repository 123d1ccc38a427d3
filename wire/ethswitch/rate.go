package ethswitch

import (
	"fmt"
	"time"
)

// rateBurst is how far ahead of its rate a port may run: frames within it go at once, the next
// waits. It absorbs the scheduler's sleeps (a sleep ends late, never early) without letting a
// burst outgrow a slow peer's receive buffer.
const rateBurst = 500 * time.Microsecond

// MaxRate bounds SetRate: 400 Gbit/s, beyond any link a frame crosses here.
const MaxRate = 400e9

// SetRate gives the port a line rate toward whatever stands on it, in bits per second (0, the
// default: none). Each frame handed to the port waits until the frames before it have had their
// time at that rate (its bytes with Ethernet's preamble, start delimiter, FCS and gap, 24 bytes,
// as the simulator's links count them), and its sender waits with it, as a sender does on an
// Ethernet that pauses rather than drops (the priority flow control RoCE fabrics run on). So a
// fabric can be shaped to its slowest peer: a datagram (UD) is never sent again, and a peer that
// takes frames in slower than they come (a guest under TCG on the uplink) loses what its socket
// cannot hold. A sender waiting for one port holds up its frames for the others too, as a
// paused NIC does.
func (p *Port) SetRate(bitsPerSecond float64) error {
	if !(bitsPerSecond >= 0 && bitsPerSecond <= MaxRate) {
		return fmt.Errorf("ethswitch: rate %g bit/s is out of range (0 for none, up to %g)", bitsPerSecond, float64(MaxRate))
	}
	p.paceMu.Lock()
	p.rate = bitsPerSecond
	p.paced.Store(bitsPerSecond > 0)
	p.paceMu.Unlock()
	return nil
}

// pace waits until a frame of n bytes may go at the port's rate.
func (p *Port) pace(n int) {
	if !p.paced.Load() {
		return // the usual port, without a rate: no lock taken per frame
	}
	p.paceMu.Lock()
	if p.rate == 0 {
		p.paceMu.Unlock()
		return
	}
	now := time.Now()
	if p.busy.Before(now) {
		p.busy = now
	}
	start := p.busy
	p.busy = p.busy.Add(time.Duration(float64(n+24) * 8 / p.rate * 1e9))
	p.paceMu.Unlock()
	if wait := start.Sub(now) - rateBurst; wait > 0 {
		time.Sleep(wait)
	}
}
