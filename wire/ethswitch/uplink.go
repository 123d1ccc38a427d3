package ethswitch

import "github.com/softirdma/softirdma/wire/roce"

// Uplink joins the switch to a real link as a port named name: frames from the link enter the
// switch as that port's, and frames for it (its MACs, learned as any port's, and floods) go out
// on the link. Closing the port closes the link. Run reads the link until it fails.
func (s *Switch) Uplink(name string, link roce.Link) *Port {
	p := s.NewPort(name)
	p.out = link
	return p
}

// Run takes frames off an uplink's link into the switch until the link fails or closes; it
// returns that error (nil for a port that is not an uplink).
func (p *Port) Run() error {
	if p.out == nil {
		return nil
	}
	bufs := make([][]byte, 32)
	for i := range bufs {
		bufs[i] = p.sw.buffer()
	}
	sizes := make([]int, len(bufs))
	for {
		n, err := p.out.RecvBatch(bufs, sizes)
		if err != nil {
			return err
		}
		p.mu.Lock()
		for i := range n {
			p.stats.RxFrames++
			p.stats.RxBytes += uint64(sizes[i])
		}
		p.mu.Unlock()
		// Each frame read goes on in its own buffer, a fresh one taking its place.
		for i := range n {
			f := bufs[i][:sizes[i]]
			bufs[i] = p.sw.buffer()
			p.sw.forward(p, f, true, false)
		}
	}
}

// sendOut puts one frame on the uplink's link.
func (p *Port) sendOut(f []byte) {
	p.outMu.Lock()
	n, _ := p.out.SendBatch([][]byte{f})
	p.outMu.Unlock()
	p.mu.Lock()
	if n == 1 {
		p.stats.TxFrames++
		p.stats.TxBytes += uint64(len(f))
	} else {
		p.dropped++
	}
	p.mu.Unlock()
}
