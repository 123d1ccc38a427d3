// Package perftest is softirdma's side of rdma-core's perftest bandwidth tools (ib_write_bw,
// ib_read_bw, ib_atomic_bw, ib_send_bw) over their TCP exchange: the version string, system
// data, MTU, the 108-byte QP records of every handshake and the bandwidth report, all
// following the rules that depend on the peer's version, so either end may be the real tool
// (perftest 6.06 in Debian bookworm, 6.24 in trixie).
package perftest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/compat/internal/ctrl"
)

// Version is what softirdma says it is: at least 5.70 (older is refused), below 6.28 (newer
// peers then skip their capability negotiation).
const Version = "6.06"

// RecordLen is the length of a QP record with a GID: 107 characters and a NUL.
const RecordLen = 108

// Record is one side's QP description (perftest's pingpong_dest).
type Record struct {
	LID      uint16
	OutReads uint16
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// Marshal renders the record as perftest writes it:
// "%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:", NUL-terminated.
func (r Record) Marshal() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", r.LID, r.OutReads, r.QPN, r.PSN, r.RKey, r.VAddr)
	for _, g := range r.GID {
		fmt.Fprintf(&b, "%02x:", g)
	}
	fmt.Fprintf(&b, "%08x:", r.SRQN)
	return append([]byte(b.String()), 0)
}

// ParseRecord reads a record: colon-separated hex fields, as perftest's parser splits them.
func ParseRecord(b []byte) (Record, error) {
	var r Record
	s := string(b)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Split(strings.TrimSuffix(s, ":"), ":")
	if len(f) != 23 {
		return r, fmt.Errorf("perftest: couldn't parse line %q", s)
	}
	var v [23]uint64
	for i, x := range f {
		n, err := strconv.ParseUint(x, 16, 64)
		if err != nil {
			return r, fmt.Errorf("perftest: couldn't parse line %q", s)
		}
		v[i] = n
	}
	if v[0] > 0xffff || v[1] > 0xffff || v[2] > 0xffffff || v[3] > 0xffffff || v[4] > 0xffffffff || v[22] > 0xffffffff {
		return r, fmt.Errorf("perftest: field out of range in %q", s)
	}
	r.LID, r.OutReads, r.QPN, r.PSN, r.RKey, r.VAddr, r.SRQN = uint16(v[0]), uint16(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5], uint32(v[22])
	for i := range 16 {
		if v[6+i] > 0xff {
			return r, fmt.Errorf("perftest: GID byte out of range in %q", s)
		}
		r.GID[i] = byte(v[6+i])
	}
	return r, nil
}

// channel is where the two sides exchange what perftest exchanges: the TCP connection (conn),
// or with -R a QP of its own connected through rdma_cm (cmConn).
type channel interface {
	// xchg is one exchange: the client sends out and then takes the peer's inLen bytes, the
	// server takes them and then sends out.
	xchg(out []byte, inLen int) ([]byte, error)
	// record is one handshake: QP records both ways.
	record(local Record) (Record, error)
	// setTimeout bounds each exchange from now on; 0 lets the next wait as long as it takes.
	setTimeout(time.Duration)
}

// conn is the control connection; every exchange is symmetric and fixed-size: the client
// writes then reads, the server reads then writes, each message in one write.
type conn struct {
	c      net.Conn
	r      *bufio.Reader
	client bool
	// watching is set while a goroutine waits for the peer to send something unexpected (see
	// watch); a read waits for it first.
	watching chan error
	// timeout bounds each exchange; 0 leaves the connection's deadline as it is.
	timeout time.Duration
	// got counts the bytes the exchanges have read, for the message when the peer goes silent.
	got int
}

func newConn(c net.Conn, client bool) *conn {
	return &conn{c: c, r: bufio.NewReader(c), client: client}
}

func (c *conn) setTimeout(d time.Duration) {
	c.timeout = d
	if d == 0 {
		_ = c.c.SetDeadline(time.Time{})
	}
}

func (c *conn) xchg(out []byte, inLen int) ([]byte, error) {
	if c.timeout > 0 {
		_ = c.c.SetDeadline(time.Now().Add(c.timeout))
	}
	in := make([]byte, inLen)
	if c.client {
		if _, err := c.c.Write(out); err != nil {
			return nil, err
		}
		c.unwatch() // after the write: the peer answers it
		return in, c.read(in)
	}
	c.unwatch()
	if err := c.read(in); err != nil {
		return nil, err
	}
	_, err := c.c.Write(out)
	return in, err
}

func (c *conn) read(in []byte) error {
	n, err := io.ReadFull(c.r, in)
	c.got += n
	if c.timeout > 0 {
		err = ctrl.Silent(err, c.timeout, c.got)
	}
	return err
}

// watch starts waiting for the peer to send something or close while this side runs the test,
// when it should do neither: the returned channel gets nil when data came, the error when the
// connection ended.
func (c *conn) watch() <-chan error {
	c.watching = make(chan error, 1)
	ch := c.watching
	_ = c.c.SetDeadline(time.Time{}) // the test takes as long as it takes
	go func() {
		_, err := c.r.Peek(1)
		ch <- err
		close(ch)
	}()
	return ch
}

// unwatch waits for the watching goroutine to be done with the reader.
func (c *conn) unwatch() {
	if c.watching != nil {
		<-c.watching
		c.watching = nil
	}
}

// versionAtLeast compares a peer's version string numerically, as atof would.
func versionAtLeast(v string, min float64) bool {
	f, err := strconv.ParseFloat(strings.TrimRight(v, "\x00"), 64)
	return err == nil && f >= min
}

// exchanger is the one operation the preamble and the report need.
type exchanger interface {
	xchg(out []byte, inLen int) ([]byte, error)
}

// handshake is everything up to and including H1: version, system data, MTU, records.
type handshake struct {
	peerVersion string
	cycleBuffer int
	cacheLine   int
	mtu         int // the negotiated ibv_mtu enum (1..5)
	peer        Record
}

// begin is the whole start of the exchange: the preamble and H1.
func (c *conn) begin(local Record, localMTU int) (handshake, error) {
	h, err := preamble(c, c.client, localMTU)
	if err != nil {
		return h, err
	}
	h.peer, err = hello(c, local)
	return h, err
}

// preamble is what comes before the QP records: version, system data, MTU. It touches nothing
// but the connection, so a server drops a client that fails it and waits for another.
func preamble(c exchanger, client bool, localMTU int) (handshake, error) {
	var h handshake
	ver := make([]byte, 16)
	copy(ver, Version)
	in, err := c.xchg(ver, 16)
	if err != nil {
		return h, fmt.Errorf("perftest: exchanging versions: %w", err)
	}
	h.peerVersion = strings.TrimRight(string(in), "\x00")
	if v, err := strconv.ParseFloat(h.peerVersion, 64); err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		err := fmt.Errorf("perftest: the peer sent %q, not a perftest version", h.peerVersion)
		if client {
			err = fmt.Errorf("%w (is the server ib_*_bw or softirdma perf, and -p its port?)", err)
		}
		return h, err
	}
	if !versionAtLeast(h.peerVersion, 5.70) {
		return h, fmt.Errorf("perftest: peer version %q is older than 5.70", h.peerVersion)
	}
	h.cycleBuffer, h.cacheLine = 4096, 64
	if versionAtLeast(h.peerVersion, 5.32) {
		for _, p := range []*int{&h.cycleBuffer, &h.cacheLine} {
			out := binary.BigEndian.AppendUint32(nil, uint32(*p))
			in, err := c.xchg(out, 4)
			if err != nil {
				return h, fmt.Errorf("perftest: exchanging system data: %w", err)
			}
			if v := int(binary.BigEndian.Uint32(in)); v > *p && v <= 1<<20 {
				*p = v
			}
		}
	}
	h.mtu = localMTU
	if versionAtLeast(h.peerVersion, 5.1) {
		n := 4
		if versionAtLeast(h.peerVersion, 5.31) {
			n = 2
		}
		out := make([]byte, n)
		out[0] = byte('0' + localMTU)
		in, err := c.xchg(out, n)
		if err != nil {
			return h, fmt.Errorf("perftest: exchanging MTU: %w", err)
		}
		if p := int(in[0] - '0'); p >= 1 && p <= 5 && p < h.mtu {
			h.mtu = p
		}
	}
	return h, nil
}

// hello is H1: the first exchange of QP records, and the check that both GIDs are of one type.
func hello(c channel, local Record) (Record, error) {
	peer, err := c.record(local)
	if err != nil {
		return peer, err
	}
	ipv4 := func(g [16]byte) bool { return [12]byte(g[:12]) == [12]byte{10: 0xff, 11: 0xff} }
	if ipv4(local.GID) != ipv4(peer.GID) {
		return peer, fmt.Errorf("perftest: found incompatibility issue with GID types (the peer's GID is %s, this side's %s: choose GIDs of one type with -x)",
			netip.AddrFrom16(peer.GID), netip.AddrFrom16(local.GID))
	}
	// A device sends frames for its own addresses to itself, so a QP to a peer with this side's
	// GID would never reach it: two processes given the same address (or, for the IPv6 GID, the
	// same MAC). Both sides have both records here, so both say so.
	if local.GID == peer.GID && local.GID != ([16]byte{}) {
		return peer, fmt.Errorf("perftest: the peer's GID %s is this side's own, so frames to it would loop back here: give each side its own address (-ip; for the IPv6 GID, -mac)",
			netip.AddrFrom16(peer.GID).Unmap())
	}
	return peer, nil
}

// errPeerClosed is a peer that closed or reset the control connection where its QP record was due.
var errPeerClosed = errors.New("perftest: the peer closed the connection instead of sending its QP record (see its output)")

// record exchanges QP records (one handshake).
func (c *conn) record(local Record) (Record, error) {
	in, err := c.xchg(local.Marshal(), RecordLen)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return Record{}, errPeerClosed
	}
	if err != nil {
		return Record{}, fmt.Errorf("perftest: couldn't read remote address: %w", err)
	}
	return ParseRecord(in)
}

// Report is a bandwidth result as the report exchange carries it.
type Report struct {
	Size, Iters     uint64
	PeakMBs, AvgMBs float64
	MsgRateMpps     float64
}

// exchangeReport swaps reports: five fixed-size big-endian exchanges, the iterations 4 bytes
// for peers older than 5.33.
func exchangeReport(c exchanger, local Report, peerVersion string) (Report, error) {
	var r Report
	itersLen := 8
	if !versionAtLeast(peerVersion, 5.33) {
		itersLen = 4
	}
	fields := []struct {
		out uint64
		n   int
		in  *uint64
	}{
		{local.Size, 8, &r.Size},
		{local.Iters, itersLen, &r.Iters},
	}
	for _, f := range fields {
		out := binary.BigEndian.AppendUint64(nil, f.out)[8-f.n:]
		in, err := c.xchg(out, f.n)
		if err != nil {
			return r, fmt.Errorf("perftest: exchanging reports: %w", err)
		}
		if f.n == 4 {
			*f.in = uint64(binary.BigEndian.Uint32(in))
		} else {
			*f.in = binary.BigEndian.Uint64(in)
		}
	}
	for _, f := range []struct {
		out float64
		in  *float64
	}{{local.PeakMBs, &r.PeakMBs}, {local.AvgMBs, &r.AvgMBs}, {local.MsgRateMpps, &r.MsgRateMpps}} {
		in, err := c.xchg(binary.BigEndian.AppendUint64(nil, math.Float64bits(f.out)), 8)
		if err != nil {
			return r, fmt.Errorf("perftest: exchanging reports: %w", err)
		}
		*f.in = math.Float64frombits(binary.BigEndian.Uint64(in))
	}
	return r, nil
}

// close ends the connection the way both perftest generations accept: "done" as 6.06 writes it
// (errors ignored), then read until the peer closes (a 6.06 peer's own "done" then lands on an
// open socket), briefly.
func (c *conn) close() {
	_, _ = c.c.Write([]byte("done\x00"))
	if cw, ok := c.c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite() // a peer that reads to the end (softirdma) sees it at once
	}
	_ = c.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	c.unwatch()
	_, _ = io.Copy(io.Discard, c.r)
	_ = c.c.Close()
}
