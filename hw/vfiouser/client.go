package vfiouser

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/softirdma/softirdma/internal/sockguard"
	"golang.org/x/sys/unix"
)

// Client speaks vfio-user to a server as QEMU 11.1's vfio-user-pci does: the same messages,
// the same field values, SET_IRQS split the same way. It is safe for concurrent use; calls
// are serialised, one request in flight at a time, as QEMU's vCPU path waits for each reply.
type Client struct {
	mu     sync.Mutex
	conn   *net.UnixConn
	id     uint16
	maxFDs int // the server's max_msg_fds, from Version; 8 until then, as QEMU assumes
	oob    []byte
}

// NewClient returns a client on conn (a socketpair end or a connection to the server's path).
func NewClient(conn *net.UnixConn) *Client {
	return &Client{conn: conn, maxFDs: 8, oob: make([]byte, unix.CmsgSpace(4*16))}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// QEMUVersionJSON is the capabilities JSON QEMU 11.1 sends in VERSION.
const QEMUVersionJSON = `{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true,"migration":{"pgsize":4096,"max_bitmap_size":134217728}}}`

// Caps is the server's answer to VERSION.
type Caps struct {
	Major, Minor    uint16
	MaxMsgFDs       int    `json:"max_msg_fds"`
	MaxDataXferSize int    `json:"max_data_xfer_size"`
	Pgsizes         uint64 `json:"pgsizes"`
	MaxDMAMaps      int    `json:"max_dma_maps"`
	WriteMultiple   bool   `json:"write_multiple"`
}

// Version negotiates as QEMU does and checks the reply as QEMU does: no larger than the
// request, NUL-terminated JSON, major 0.
func (c *Client) Version() (Caps, error) {
	req := make([]byte, 4, 4+len(QEMUVersionJSON)+1)
	req = append(append(req, QEMUVersionJSON...), 0)
	r, _, err := c.Call(CmdVersion, 0, req, nil)
	if err != nil {
		return Caps{}, err
	}
	if len(r) > len(req) || len(r) < 5 || r[len(r)-1] != 0 {
		return Caps{}, fmt.Errorf("vfio-user VERSION: reply of %d bytes to %d, or JSON not NUL-terminated", len(r), len(req))
	}
	var v struct {
		Capabilities Caps `json:"capabilities"`
	}
	if err := json.Unmarshal(r[4:len(r)-1], &v); err != nil {
		return Caps{}, fmt.Errorf("vfio-user VERSION: %w", err)
	}
	caps := v.Capabilities
	caps.Major, caps.Minor = versionMsg(r).major(), versionMsg(r).minor()
	if caps.Major != 0 || caps.Pgsizes == 0 {
		return caps, fmt.Errorf("vfio-user VERSION: major %d, pgsizes %d", caps.Major, caps.Pgsizes)
	}
	if caps.MaxMsgFDs > 0 {
		c.mu.Lock()
		c.maxFDs = min(caps.MaxMsgFDs, 16)
		c.mu.Unlock()
	}
	return caps, nil
}

// DMAMap offers [iova, iova+size) of the client's memory, backed by fd at offset (fd -1: no
// file, as QEMU sends ROM). prot is DMARead|DMAWrite.
func (c *Client) DMAMap(iova, size uint64, fd int, offset uint64, prot uint32) error {
	m := dmaMapMsg{make(argszView, dmaMapSize)}
	m.setArgsz(dmaMapSize)
	m.setFlags(prot)
	m.setOffset(offset)
	m.setIOVA(iova)
	m.setSize(size)
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	_, _, err := c.Call(CmdDMAMap, 0, m.argszView, fds)
	return err
}

// DMAUnmap withdraws an earlier map exactly, or every map with all (iova and size 0).
func (c *Client) DMAUnmap(iova, size uint64, all bool) error {
	m := dmaUnmapMsg{make(argszView, dmaUnmapSize)}
	m.setArgsz(dmaUnmapSize)
	if all {
		m.setFlags(DMAUnmapAll)
	}
	m.setIOVA(iova)
	m.setSize(size)
	r, _, err := c.Call(CmdDMAUnmap, 0, m.argszView, nil)
	if err == nil && len(r) != dmaUnmapSize {
		err = fmt.Errorf("vfio-user DMA_UNMAP: reply of %d bytes, want %d", len(r), dmaUnmapSize)
	}
	return err
}

// DeviceInfo is DEVICE_GET_INFO's answer.
type DeviceInfo struct {
	Flags, NumRegions, NumIRQs uint32
}

// GetDeviceInfo asks for the device's flags and counts, refusing what QEMU refuses.
func (c *Client) GetDeviceInfo() (DeviceInfo, error) {
	b := make(argszView, deviceInfoSize)
	b.setArgsz(deviceInfoSize)
	r, _, err := c.Call(CmdDeviceGetInfo, 0, b, nil)
	if err != nil {
		return DeviceInfo{}, err
	}
	if len(r) < deviceInfoSize {
		return DeviceInfo{}, fmt.Errorf("vfio-user DEVICE_GET_INFO: reply of %d bytes", len(r))
	}
	m := deviceInfoMsg{argszView(r)}
	d := DeviceInfo{Flags: m.flags(), NumRegions: m.numRegions(), NumIRQs: m.numIRQs()}
	if d.NumRegions > maxRegions || d.NumIRQs > maxIRQs {
		return d, fmt.Errorf("vfio-user DEVICE_GET_INFO: %d regions, %d irqs", d.NumRegions, d.NumIRQs)
	}
	return d, nil
}

// RegionInfo is DEVICE_GET_REGION_INFO's answer. FD is the descriptor that came with it for
// an mmappable region (-1 if none); the caller owns it.
type RegionInfo struct {
	Index, Flags uint32
	Size         uint64
	Offset       uint64 // file offset of the region in FD
	Sparse       []SparseArea
	FD           int
}

// GetRegionInfo asks for region index with QEMU's argsz dance: first the bare struct, then
// again with the size the server said its capabilities need.
func (c *Client) GetRegionInfo(index uint32) (RegionInfo, error) {
	asked := uint32(regionInfoSize)
	for try := 0; try < 2; try++ {
		m := regionInfoMsg{make(argszView, regionInfoSize)}
		m.setArgsz(asked)
		m.setIndex(index)
		r, fds, err := c.Call(CmdRegionInfo, 0, m.argszView, nil)
		if err != nil {
			return RegionInfo{}, err
		}
		ri, need, err := parseRegionInfo(r, asked)
		if err == nil && need > asked && try == 0 {
			sockguard.CloseFDs(fds)
			asked = need
			continue
		}
		if err != nil || len(fds) > 1 {
			sockguard.CloseFDs(fds)
			if err == nil {
				err = fmt.Errorf("vfio-user DEVICE_GET_REGION_INFO: %d fds", len(fds))
			}
			return RegionInfo{}, err
		}
		ri.FD = -1
		if len(fds) == 1 {
			ri.FD = fds[0]
		}
		return ri, nil
	}
	return RegionInfo{}, fmt.Errorf("vfio-user DEVICE_GET_REGION_INFO %d: argsz keeps growing", index)
}

func parseRegionInfo(r []byte, asked uint32) (RegionInfo, uint32, error) {
	if len(r) < regionInfoSize || uint32(len(r)) > asked {
		return RegionInfo{}, 0, fmt.Errorf("vfio-user DEVICE_GET_REGION_INFO: reply of %d bytes for argsz %d", len(r), asked)
	}
	m := regionInfoMsg{argszView(r)}
	ri := RegionInfo{Flags: m.flags(), Index: m.index(), Size: m.size(), Offset: m.offset()}
	need, capOff := m.argsz(), m.capOffset()
	if need > asked || capOff == 0 || ri.Flags&RegionFlagCaps == 0 {
		return ri, need, nil
	}
	if uint64(capOff)+sparseCapHeader > uint64(len(r)) {
		return ri, need, fmt.Errorf("vfio-user DEVICE_GET_REGION_INFO: capability at %d past the reply", capOff)
	}
	c := sparseCapMsg(r[capOff:])
	if c.id() != capSparseMmap {
		return ri, need, nil
	}
	n := c.nrAreas()
	if uint64(n)*sparseAreaSize > uint64(len(c)-sparseCapHeader) {
		return ri, need, fmt.Errorf("vfio-user DEVICE_GET_REGION_INFO: %d sparse areas past the reply", n)
	}
	for i := range int(n) {
		ri.Sparse = append(ri.Sparse, c.area(i))
	}
	return ri, need, nil
}

// GetIRQInfo asks for IRQ index's count and flags.
func (c *Client) GetIRQInfo(index uint32) (IRQ, error) {
	m := irqInfoMsg{make(argszView, irqInfoSize)}
	m.setArgsz(irqInfoSize)
	m.setIndex(index)
	r, _, err := c.Call(CmdIRQInfo, 0, m.argszView, nil)
	if err != nil {
		return IRQ{}, err
	}
	if len(r) < irqInfoSize {
		return IRQ{}, fmt.Errorf("vfio-user DEVICE_GET_IRQ_INFO: reply of %d bytes", len(r))
	}
	a := irqInfoMsg{argszView(r)}
	return IRQ{Flags: a.flags(), Count: a.count()}, nil
}

// SetIRQEventfds assigns fds to vectors start.. of index (an fd of -1 deassigns its vector),
// split as QEMU splits it: runs of all-valid or all-invalid fds, at most max_msg_fds each.
func (c *Client) SetIRQEventfds(index, start uint32, fds []int) error {
	c.mu.Lock()
	max := c.maxFDs
	c.mu.Unlock()
	for sent := 0; sent < len(fds); {
		n := 1
		for n < max && sent+n < len(fds) && (fds[sent+n] == -1) == (fds[sent] == -1) {
			n++
		}
		var send []int
		if fds[sent] != -1 {
			send = fds[sent : sent+n]
		}
		if err := c.SetIRQs(IRQDataEventfd|IRQActionTrig, index, start+uint32(sent), uint32(n), nil, send); err != nil {
			return err
		}
		sent += n
	}
	return nil
}

// SetIRQs sends one DEVICE_SET_IRQS as given: flags, the vector range, DATA_BOOL bytes in
// data, eventfds in fds. DATA_NONE|ACTION_TRIGGER with start 0 count 0 disables the index.
func (c *Client) SetIRQs(flags, index, start, count uint32, data []byte, fds []int) error {
	m := irqSetMsg{make(argszView, irqSetSize+len(data))}
	m.setArgsz(uint32(irqSetSize + len(data)))
	m.setFlags(flags)
	m.setIndex(index)
	m.setStart(start)
	m.setCount(count)
	copy(m.data(), data)
	_, _, err := c.Call(CmdSetIRQs, 0, m.argszView, fds)
	return err
}

// RegionRead reads len(data) bytes of region index at offset.
func (c *Client) RegionRead(index uint32, offset uint64, data []byte) error {
	r, _, err := c.Call(CmdRegionRead, 0, regionRW(index, offset, len(data)), nil)
	if err != nil {
		return err
	}
	if len(r) < regionRWSize || regionRWMsg(r).count() != uint32(len(data)) || len(regionRWMsg(r).data()) != len(data) {
		return fmt.Errorf("vfio-user REGION_READ: reply of %d bytes for %d", len(r), len(data))
	}
	copy(data, regionRWMsg(r).data())
	return nil
}

// RegionWrite writes data at offset of region index. A posted write (QEMU's BAR writes) asks
// for no reply and returns once sent.
func (c *Client) RegionWrite(index uint32, offset uint64, data []byte, posted bool) error {
	b := regionRW(index, offset, len(data))
	b = append(b, data...)
	var flags uint32
	if posted {
		flags = FlagNoReply
	}
	_, _, err := c.Call(CmdRegionWrite, flags, b, nil)
	return err
}

// regionRW is the fixed part of a REGION_READ or REGION_WRITE of count bytes at offset of
// region index, with room for a write's data after it.
func regionRW(index uint32, offset uint64, count int) regionRWMsg {
	m := make(regionRWMsg, regionRWSize, regionRWSize+count)
	m.setOffset(offset)
	m.setRegion(index)
	m.setCount(uint32(count))
	return m
}

// Write is one entry of a REGION_WRITE_MULTI: at most 8 bytes.
type Write struct {
	Region uint32
	Offset uint64
	Data   []byte
}

// WriteMulti sends up to 200 small posted writes in one message, as QEMU does when its queue
// is deep and the server offered write_multiple.
func (c *Client) WriteMulti(ws []Write) error {
	if len(ws) == 0 || len(ws) > maxMultiWr {
		return fmt.Errorf("vfio-user REGION_WRITE_MULTI of %d writes: %w", len(ws), syscall.EINVAL)
	}
	b := make(writeMultiMsg, 8+multiWrEntry*len(ws))
	b.setCount(uint64(len(ws)))
	for i, w := range ws {
		if len(w.Data) > multiWrData {
			return fmt.Errorf("vfio-user REGION_WRITE_MULTI entry of %d bytes: %w", len(w.Data), syscall.EINVAL)
		}
		e := b.entry(i)
		e.setOffset(w.Offset)
		e.setRegion(w.Region)
		e.setCount(uint32(len(w.Data)))
		copy(e.data(), w.Data)
	}
	_, _, err := c.Call(CmdRegionWriteMulti, FlagNoReply, b, nil)
	return err
}

// Reset sends DEVICE_RESET.
func (c *Client) Reset() error {
	_, _, err := c.Call(CmdDeviceReset, 0, nil, nil)
	return err
}

// Call sends one request with body and fds and, unless flags has FlagNoReply, waits for its
// reply: the reply's body and descriptors, or a *RemoteError for an error reply.
func (c *Client) Call(cmd Command, flags uint32, body []byte, fds []int) ([]byte, []int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id++
	h := Header{ID: c.id, Cmd: cmd, Size: uint32(HeaderSize + len(body)), Flags: flags}
	msg := make([]byte, h.Size)
	h.put(msg)
	copy(msg[HeaderSize:], body)
	return c.roundTrip(msg, fds)
}

// CallRaw sends msg as it is (header included, nothing checked) with fds and, when wantReply,
// reads one reply: for tests that send what a broken client would.
func (c *Client) CallRaw(msg []byte, fds []int, wantReply bool) (Header, []byte, []int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.send(msg, fds); err != nil || !wantReply {
		return Header{}, nil, nil, err
	}
	return c.recv()
}

func (c *Client) send(msg []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return writeMsg(c.conn, msg, oob)
}

// writeMsg sends msg with oob on its first bytes. A stream socket may take a large message in
// parts; the rest follows without descriptors.
func writeMsg(conn *net.UnixConn, msg, oob []byte) error {
	n, _, err := conn.WriteMsgUnix(msg, oob, nil)
	if err == nil && n < len(msg) {
		_, err = conn.Write(msg[n:])
	}
	return err
}

func (c *Client) roundTrip(msg []byte, fds []int) ([]byte, []int, error) {
	h := parseHeader(msg)
	if err := c.send(msg, fds); err != nil {
		return nil, nil, err
	}
	if h.Flags&FlagNoReply != 0 {
		return nil, nil, nil
	}
	rh, body, rfds, err := c.recv()
	if err != nil {
		return nil, nil, err
	}
	if rh.ID != h.ID || rh.Cmd != h.Cmd || rh.Flags&FlagTypeMask != FlagReply {
		sockguard.CloseFDs(rfds)
		return nil, nil, fmt.Errorf("vfio-user %s: reply id %d cmd %d flags 0x%x to request id %d", h.Cmd, rh.ID, rh.Cmd, rh.Flags, h.ID)
	}
	if rh.Flags&FlagError != 0 {
		sockguard.CloseFDs(rfds)
		return nil, nil, &RemoteError{Cmd: h.Cmd, Errno: syscall.Errno(rh.Errno)}
	}
	return body, rfds, nil
}

// recv reads one whole message.
func (c *Client) recv() (Header, []byte, []int, error) {
	var hb [HeaderSize]byte
	fds, err := c.readFull(hb[:], nil)
	if err != nil {
		sockguard.CloseFDs(fds)
		return Header{}, nil, nil, err
	}
	h := parseHeader(hb[:])
	if h.Size < HeaderSize || h.Size > 64<<20 {
		sockguard.CloseFDs(fds)
		return h, nil, nil, fmt.Errorf("vfio-user: reply size %d", h.Size)
	}
	body := make([]byte, h.Size-HeaderSize)
	if fds, err = c.readFull(body, fds); err != nil {
		sockguard.CloseFDs(fds)
		return h, nil, nil, err
	}
	return h, body, fds, nil
}

func (c *Client) readFull(b []byte, fds []int) ([]int, error) {
	for len(b) > 0 {
		n, oobn, _, _, err := c.conn.ReadMsgUnix(b, c.oob)
		if oobn > 0 {
			fds = append(fds, sockguard.Rights(c.oob[:oobn])...)
		}
		if err != nil {
			return fds, err
		}
		if n == 0 {
			return fds, io.ErrUnexpectedEOF
		}
		b = b[n:]
	}
	return fds, nil
}
