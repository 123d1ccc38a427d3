package rdmacm

import (
	"bytes"
	"io"
	"net/netip"

	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/mad"
)

// Held is what a manager holds, for the tests outside the package: its IDs in the table, its
// listeners, QP1's address handles kept, and whether QP1 and its memory are released.
type Held struct {
	Conns, Listeners, AHs int
	Released              bool
}

func HeldBy(m *Manager) Held {
	l := m.liveCount()
	m.mu.Lock()
	listeners := len(m.listeners)
	m.mu.Unlock()
	m.agent.mu.Lock()
	defer m.agent.mu.Unlock()
	return Held{Conns: l.conns, Listeners: listeners, AHs: l.ahs, Released: m.agent.released}
}

// CapturedMAD is a MAD to a QP1 in a capture: who sent it, its header and the class's data.
type CapturedMAD struct {
	Src  netip.Addr
	Hdr  mad.Header
	Body []byte
}

// CapturedMADs are the MADs to QP1 in a pcap capture, in order.
func CapturedMADs(t tb, pcap []byte) []CapturedMAD {
	t.Helper()
	r, err := wire.NewPcapReader(bytes.NewReader(pcap))
	hmust(t, err)
	var out []CapturedMAD
	var p wire.Parser
	var f wire.Frame
	for {
		data, _, err := r.Next()
		if err == io.EOF {
			return out
		}
		hmust(t, err)
		if p.Parse(&f, data) != nil || f.DETH == nil || f.BTH.DestQP() != 1 {
			continue
		}
		h, err := mad.Parse(f.Payload)
		hmust(t, err)
		out = append(out, CapturedMAD{Src: f.SrcIP(), Hdr: h, Body: bytes.Clone(f.Payload[mad.HeaderLen:])})
	}
}
