package ucontext

import (
	"encoding/binary"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
)

// GET_CONTEXT: the async event file and one completion vector.
func (c *Context) getContext(r *request) error {
	if c.opened {
		return errf(syscall.EINVAL, "a second GET_CONTEXT")
	}
	ch, file, err := newChannel(asyncEventSize)
	if err != nil {
		return err
	}
	c.opened = true
	c.async.Store(ch)
	r.files = append(r.files, fileAt{0, file})
	putU32(r.resp[4:], 1) // num_comp_vectors
	return nil
}

// Device capability flags (enum ibv_device_cap_flags) rxe reports, for what the engine does.
const (
	capBadPKeyCntr      = 1 << 1
	capBadQKeyCntr      = 1 << 2
	capAutoPathMig      = 1 << 4
	capChangePhyPort    = 1 << 5
	capUDAVPortEnforce  = 1 << 6
	capPortActiveEvent  = 1 << 10
	capSysImageGUID     = 1 << 11
	capRCRNRNakGen      = 1 << 12
	capSRQResize        = 1 << 13
	capMemWindow        = 1 << 17
	capMemMgtExtensions = 1 << 21
	capMemWindowType2B  = 1 << 24
	deviceCaps          = capBadPKeyCntr | capBadQKeyCntr | capAutoPathMig | capChangePhyPort | capUDAVPortEnforce |
		capPortActiveEvent | capSysImageGUID | capRCRNRNakGen | capSRQResize | capMemWindow | capMemMgtExtensions | capMemWindowType2B
)

// maxSRQSGE and the rest are what rxe reports where the engine has no limit of its own.
const (
	maxMcastGroups  = 8192
	maxMcastAttach  = 56
	maxAH           = 1 << 15
	maxCQ           = 1 << 14
	localAckDelay   = 15
	vendorID        = 0xffffff // rxe's RXE_VENDOR_ID
	atomicCapHCA    = 1        // IBV_ATOMIC_HCA
	pageSizeCap     = 0xfffff000
	portCapCMSup    = 1 << 16
	maxPortMsgSize  = 1 << 31
	portStateActive = 4
	physStateLinkUp = 5
	linkEthernet    = 2
)

// attrs writes struct ib_uverbs_query_device_resp (176 bytes) into b.
func (c *Context) attrs(b []byte) {
	l := c.dev.Engine.Limits()
	le := binary.LittleEndian
	binary.BigEndian.PutUint64(b[8:], c.dev.NodeGUID)
	binary.BigEndian.PutUint64(b[16:], c.dev.NodeGUID)
	le.PutUint64(b[24:], ^uint64(0)) // max_mr_size: rxe's, no limit of the device's
	le.PutUint64(b[32:], pageSizeCap)
	le.PutUint32(b[40:], vendorID)
	for off, v := range map[int]int{52: l.MaxQP, 56: l.MaxQPWR, 60: deviceCaps, 64: l.MaxSGE, 68: l.MaxSGE,
		72: maxCQ, 76: l.MaxCQE, 80: l.MaxMR, 84: l.MaxPD, 88: l.MaxQPRdAtom, 96: l.MaxQPRdAtom * l.MaxQP,
		100: l.MaxQPInitRdAtom, 108: atomicCapHCA, 120: l.MaxMW, 132: maxMcastGroups, 136: maxMcastAttach,
		140: maxMcastGroups * maxMcastAttach, 144: maxAH, 156: l.MaxSRQ, 160: l.MaxSRQWR, 164: l.MaxSGE} {
		le.PutUint32(b[off:], uint32(min(v, 1<<31-1)))
	}
	le.PutUint16(b[168:], 1) // max_pkeys
	b[170] = localAckDelay
	b[171] = 1 // phys_port_cnt
}

func (c *Context) queryDevice(r *request) error {
	c.attrs(r.resp)
	return nil
}

// EX_QUERY_DEVICE: the base attributes and nothing of the extended ones but the length, as
// rxe answers.
func (c *Context) queryDeviceEx(r *request) error {
	if r.u32(0) != 0 || r.u32(4) != 0 {
		return errf(syscall.EINVAL, "EX_QUERY_DEVICE comp_mask 0x%x reserved 0x%x", r.u32(0), r.u32(4))
	}
	if len(r.DriverIn) != 0 {
		return errf(syscall.EINVAL, "EX_QUERY_DEVICE with driver data")
	}
	c.attrs(r.resp)
	putU32(r.resp[180:], uint32(min(r.CoreOut, len(r.resp))))
	return nil
}

func (c *Context) queryPort(r *request) error {
	if port := r.Core[8]; port != 1 {
		return errf(syscall.EINVAL, "port %d (the device has port 1)", port)
	}
	b := r.resp
	le := binary.LittleEndian
	le.PutUint32(b[0:], portCapCMSup)
	le.PutUint32(b[4:], maxPortMsgSize)
	le.PutUint32(b[16:], uint32(len(c.dev.GIDs)))
	le.PutUint16(b[20:], 1) // pkey_tbl_len
	b[26] = portStateActive
	if !c.dev.Engine.PortActive() {
		b[26] = 1 // IBV_PORT_DOWN
	}
	b[27] = byte(engine.MTU4096)
	b[28] = byte(c.dev.Engine.ActiveMTU())
	b[30] = 1 // max_vl_num
	b[34] = 1 // active_width 1X
	b[35] = 1 // active_speed SDR
	b[36] = physStateLinkUp
	b[37] = linkEthernet
	return nil
}
