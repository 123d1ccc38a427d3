// Package qemu is softirdma's end of QEMU's socket network backends, so a guest's NIC is wired
// straight to softirdma: "-netdev dgram" (one Ethernet frame per UDP datagram, or per UNIX
// datagram) and "-netdev stream" (each frame behind a 4-byte big-endian length, over TCP or a
// UNIX stream socket).
package qemu

import (
	"fmt"
	"net"
	"sync/atomic"

	"github.com/softirdma/softirdma/wire/roce"

	"golang.org/x/net/ipv4"
)

// Dgram is the far end of "-netdev dgram": it receives the guest's frames on one UDP address and
// sends frames to another (QEMU's local and remote addresses, swapped).
type Dgram struct {
	conn   *net.UDPConn
	batch  *ipv4.PacketConn // sendmmsg/recvmmsg when the socket is IPv4
	remote *net.UDPAddr
	msgs   []ipv4.Message
	rmsgs  []ipv4.Message
	stats  stats
}

type stats struct {
	txFrames, txBytes, rxFrames, rxBytes, rxDropped atomic.Uint64
}

func (s *stats) snapshot() roce.LinkStats {
	return roce.LinkStats{TxFrames: s.txFrames.Load(), TxBytes: s.txBytes.Load(), RxFrames: s.rxFrames.Load(),
		RxBytes: s.rxBytes.Load(), RxDropped: s.rxDropped.Load()}
}

// ListenDgram binds local (where the guest sends, QEMU's remote address) and sends to remote
// (where the guest listens, QEMU's local address).
func ListenDgram(local, remote string) (*Dgram, error) {
	la, err := net.ResolveUDPAddr("udp", local)
	if err != nil {
		return nil, fmt.Errorf("qemu dgram: local address: %w", err)
	}
	ra, err := net.ResolveUDPAddr("udp", remote)
	if err != nil {
		return nil, fmt.Errorf("qemu dgram: remote address: %w", err)
	}
	c, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, fmt.Errorf("qemu dgram: %w", err)
	}
	_ = c.SetReadBuffer(4 << 20)
	_ = c.SetWriteBuffer(4 << 20)
	d := &Dgram{conn: c, remote: ra}
	if la.IP == nil || la.IP.To4() != nil {
		d.batch = ipv4.NewPacketConn(c)
	}
	return d, nil
}

// SetRemote changes where frames are sent. Call it before traffic flows.
func (d *Dgram) SetRemote(remote string) error {
	ra, err := net.ResolveUDPAddr("udp", remote)
	if err != nil {
		return fmt.Errorf("qemu dgram: remote address: %w", err)
	}
	d.remote = ra
	return nil
}

// LocalAddr is the address frames are received on.
func (d *Dgram) LocalAddr() *net.UDPAddr { return d.conn.LocalAddr().(*net.UDPAddr) }

// Stats reports what the link did.
func (d *Dgram) Stats() roce.LinkStats { return d.stats.snapshot() }

// SendBatch sends each frame as one datagram, with sendmmsg where it can.
func (d *Dgram) SendBatch(frames [][]byte) (int, error) {
	if d.batch == nil {
		for i, f := range frames {
			if _, err := d.conn.WriteToUDP(f, d.remote); err != nil {
				return i, fmt.Errorf("qemu dgram: %w", err)
			}
			d.stats.txFrames.Add(1)
			d.stats.txBytes.Add(uint64(len(f)))
		}
		return len(frames), nil
	}
	if cap(d.msgs) < len(frames) {
		d.msgs = make([]ipv4.Message, len(frames))
		for i := range d.msgs {
			d.msgs[i].Buffers = make([][]byte, 1)
		}
	}
	msgs := d.msgs[:len(frames)]
	for i, f := range frames {
		msgs[i].Buffers[0] = f
		msgs[i].Addr = d.remote
	}
	sent := 0
	for sent < len(msgs) {
		n, err := d.batch.WriteBatch(msgs[sent:], 0)
		for _, m := range msgs[sent : sent+n] {
			d.stats.txFrames.Add(1)
			d.stats.txBytes.Add(uint64(len(m.Buffers[0])))
		}
		sent += n
		if err != nil {
			return sent, fmt.Errorf("qemu dgram: %w", err)
		}
	}
	for i := range msgs {
		msgs[i].Buffers[0] = nil
	}
	return sent, nil
}

// RecvBatch receives datagrams, with recvmmsg where it can. A datagram that does not fit its
// buffer, or is shorter than an Ethernet header, is dropped and counted.
func (d *Dgram) RecvBatch(bufs [][]byte, sizes []int) (int, error) {
	for {
		n, err := d.recv(bufs, sizes)
		if err != nil || n > 0 {
			return n, err
		}
	}
}

func (d *Dgram) recv(bufs [][]byte, sizes []int) (int, error) {
	if d.batch == nil {
		n, _, flags, _, err := d.conn.ReadMsgUDP(bufs[0], nil)
		if err != nil {
			return 0, fmt.Errorf("qemu dgram: %w", err)
		}
		return d.keep(bufs[:1], sizes, []int{n}, []bool{flags&msgTrunc != 0}), nil
	}
	if cap(d.rmsgs) < len(bufs) {
		d.rmsgs = make([]ipv4.Message, len(bufs))
		for i := range d.rmsgs {
			d.rmsgs[i].Buffers = make([][]byte, 1)
		}
	}
	msgs := d.rmsgs[:len(bufs)]
	for i := range msgs {
		msgs[i].Buffers[0] = bufs[i]
	}
	n, err := d.batch.ReadBatch(msgs, 0)
	if err != nil {
		return 0, fmt.Errorf("qemu dgram: %w", err)
	}
	lens := make([]int, n)
	trunc := make([]bool, n)
	for i := range n {
		lens[i], trunc[i] = msgs[i].N, msgs[i].Flags&msgTrunc != 0
	}
	return d.keep(bufs[:n], sizes, lens, trunc), nil
}

// keep compacts the good frames to the front of bufs and returns how many there are.
func (d *Dgram) keep(bufs [][]byte, sizes []int, lens []int, trunc []bool) int {
	k := 0
	for i := range bufs {
		if trunc[i] || lens[i] < roce.EthernetLen || lens[i] > len(bufs[i]) {
			d.stats.rxDropped.Add(1)
			continue
		}
		bufs[k], bufs[i] = bufs[i], bufs[k]
		sizes[k] = lens[i]
		d.stats.rxFrames.Add(1)
		d.stats.rxBytes.Add(uint64(lens[i]))
		k++
	}
	return k
}

// Close closes the socket.
func (d *Dgram) Close() error { return d.conn.Close() }

// msgTrunc is MSG_TRUNC: the datagram was longer than the buffer.
const msgTrunc = 0x20
