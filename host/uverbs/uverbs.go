// Package uverbs reads the commands a program writes to /dev/infiniband/uverbsN as the kernel's
// ib_uverbs_write reads them: the header, legacy or extended, checked in the kernel's order and
// refused with its errnos, and each command's core request, its driver data and where in the
// program's memory its response goes. What the commands then do is the server's; this package
// owns the framing every one of them shares.
//
// The layouts are those of include/uapi/rdma/ib_user_verbs.h (ABI version 6): a legacy command
// is an 8-byte header (command, in_words, out_words: its whole length and its response's in
// 4-byte words) and a core request that starts with the response's address if it has one; an
// extended command adds a 16-byte header (response address, driver words, a reserved word) and
// counts in 8-byte words, headers excluded.
package uverbs

import (
	"encoding/binary"
	"syscall"
)

const (
	headerLen   = 8
	exHeaderLen = 24
	commandMask = 0xff
)

// Command is one command as the kernel has checked it.
type Command struct {
	Num      uint32 // the command, with FlagExtended for an extended one
	Method   Method
	Core     []byte // the core request: Method.Req bytes, an extended one's up to its whole struct
	DriverIn []byte // the driver's request data (rxe's MODIFY_SRQ address, say)

	// Response is the address in the program's memory of the core response, CoreOut bytes long
	// (at least Method.Resp), followed directly by DriverOut bytes for the driver's; 0 if the
	// command has none.
	Response  uint64
	CoreOut   int
	DriverOut int
}

// Decode checks the header of a command written to the uverbs device and splits it: the
// errno is the one the kernel's write() would fail with, 0 if it would run the command.
func Decode(buf []byte) (Command, syscall.Errno) {
	if len(buf) < headerLen {
		return Command{}, syscall.EINVAL
	}
	cmd := binary.LittleEndian.Uint32(buf)
	inWords := int(binary.LittleEndian.Uint16(buf[4:]))
	outWords := int(binary.LittleEndian.Uint16(buf[6:]))
	if cmd&^(FlagExtended|commandMask) != 0 {
		return Command{}, syscall.EINVAL
	}
	extended := cmd&FlagExtended != 0
	if n := cmd & commandMask; extended && n >= numExtendedMethods || !extended && n >= numLegacyMethods {
		return Command{}, syscall.EOPNOTSUPP
	}
	m, known := methods[cmd]
	if !known {
		// A number in range that the device does not serve: the kernel's notsupp_method, checked
		// as a legacy command with nothing in or out, then refused.
		if inWords*4 != len(buf) {
			return Command{}, syscall.EINVAL
		}
		return Command{}, syscall.EOPNOTSUPP
	}
	c := Command{Num: cmd, Method: m}
	var errno syscall.Errno
	if extended {
		errno = c.decodeExtended(buf, inWords, outWords)
	} else {
		errno = c.decodeLegacy(buf, inWords, outWords)
	}
	if errno != 0 {
		return Command{}, errno
	}
	return c, 0
}

// decodeLegacy checks a legacy command (verify_hdr's legacy rules) and splits it.
func (c *Command) decodeLegacy(buf []byte, inWords, outWords int) syscall.Errno {
	m := c.Method
	if inWords*4 != len(buf) {
		return syscall.EINVAL
	}
	switch {
	case c.Num == CmdDestroyCQ && len(buf) == 16:
		// The kernel's allowance for rdma-core 18 and 19, which wrote DESTROY_CQ 8 bytes short:
		// taken as the whole command, its response size unchecked.
		buf = append(buf[:16:16], make([]byte, 8)...)
	case len(buf) < headerLen+m.Req:
		return syscall.ENOSPC
	case outWords*4 < m.Resp:
		return syscall.ENOSPC
	}
	in := buf[headerLen:]
	c.CoreOut = outWords * 4
	if m.Udata {
		c.Core, c.DriverIn = in[:m.Req], in[m.Req:]
		c.CoreOut, c.DriverOut = m.Resp, outWords*4-m.Resp
	} else {
		c.Core = in[:m.Req]
		if !allZero(in[m.Req:]) {
			return syscall.EOPNOTSUPP // more than the kernel knows, and not zero
		}
	}
	if m.Resp > 0 {
		c.Response = binary.LittleEndian.Uint64(in)
	}
	return 0
}

// decodeExtended checks an extended command (verify_hdr's extended rules) and splits it.
func (c *Command) decodeExtended(buf []byte, inWords, outWords int) syscall.Errno {
	m := c.Method
	if len(buf) < exHeaderLen {
		return syscall.EINVAL
	}
	response := binary.LittleEndian.Uint64(buf[8:])
	driverInWords := int(binary.LittleEndian.Uint16(buf[16:]))
	driverOutWords := int(binary.LittleEndian.Uint16(buf[18:]))
	reserved := binary.LittleEndian.Uint32(buf[20:])
	if (inWords+driverInWords)*8 != len(buf)-exHeaderLen {
		return syscall.EINVAL
	}
	if inWords*8 < m.Req {
		return syscall.ENOSPC
	}
	if reserved != 0 {
		return syscall.EINVAL
	}
	if response != 0 {
		if outWords == 0 && driverOutWords == 0 {
			return syscall.EINVAL
		}
		if outWords*8 < m.Resp {
			return syscall.ENOSPC
		}
	} else if outWords != 0 || driverOutWords != 0 {
		return syscall.EINVAL
	}
	core := buf[exHeaderLen : exHeaderLen+inWords*8]
	// The handler reads its whole struct (uverbs_request), which may go past the last member
	// the method's size counts: what is past the struct must be zero.
	full := min(len(core), max(m.Req, exStructSize[c.Num]))
	if !allZero(core[full:]) {
		return syscall.EOPNOTSUPP
	}
	c.Core, c.DriverIn = core[:full], buf[exHeaderLen+inWords*8:]
	c.Response, c.CoreOut, c.DriverOut = response, outWords*8, driverOutWords*8
	return 0
}

// exStructSize is the size of the struct an extended command's handler reads, where it is more
// than the method's request size: EX_CREATE_QP's create_flags, rwq_ind_tbl_handle and
// source_qpn follow its comp_mask, EX_MODIFY_QP's rate_limit its base.
var exStructSize = map[uint32]int{CmdExCreateQP: 64, CmdExModifyQP: 120}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
