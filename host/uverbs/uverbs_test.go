package uverbs

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// The sizes in the method table are the kernel's, read from the uapi header the C toolchain
// has (linux-libc-dev's <rdma/ib_user_verbs.h>): sizeof for a legacy command, offsetofend of
// the last member the kernel reads for an extended one.
func TestMethodSizesAreTheKernelHeaders(t *testing.T) {
	var nums []uint32
	for n := range methods {
		nums = append(nums, n)
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	var c strings.Builder
	c.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include <rdma/ib_user_verbs.h>\n")
	c.WriteString("#define END(s, m) (offsetof(struct s, m) + sizeof(((struct s *)0)->m))\nint main(void) {\n")
	size := func(st, last string) string {
		switch {
		case st == "":
			return "0"
		case last != "":
			return fmt.Sprintf("END(%s, %s)", st, last)
		}
		return fmt.Sprintf("sizeof(struct %s)", st)
	}
	for _, n := range nums {
		m := methods[n]
		fmt.Fprintf(&c, "\tprintf(\"%s %%zu %%zu\\n\", (size_t)%s, (size_t)%s);\n", m.Name, size(m.reqC, m.lastReq), size(m.respC, m.lastResp))
	}
	c.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "sizes.c"), filepath.Join(dir, "sizes")
	if err := os.WriteFile(src, []byte(c.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc (it and linux-libc-dev's <rdma/ib_user_verbs.h> are needed): %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, n := range nums {
		m := methods[n]
		if want := fmt.Sprintf("%s %d %d", m.Name, m.Req, m.Resp); lines[i] != want {
			t.Errorf("%s: the header says %q, the table %q", m.Name, lines[i], want)
		}
	}
}

// command builds a legacy command of n bytes whose header says inWords and outWords; it starts
// its core with the response address 0x7fff0000 and fills the rest with fill.
func command(cmd uint32, n, inWords, outWords int, fill byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = fill
	}
	binary.LittleEndian.PutUint32(b, cmd)
	binary.LittleEndian.PutUint16(b[4:], uint16(inWords))
	binary.LittleEndian.PutUint16(b[6:], uint16(outWords))
	if n >= 16 {
		binary.LittleEndian.PutUint64(b[8:], 0x7fff0000)
	}
	return b
}

// extended builds an extended command: its core of inWords*8 bytes and driver data of
// driverIn*8, both zero.
func extended(cmd uint32, inWords, outWords int, response uint64, driverIn, driverOut int) []byte {
	b := make([]byte, 24+(inWords+driverIn)*8)
	binary.LittleEndian.PutUint32(b, cmd)
	binary.LittleEndian.PutUint16(b[4:], uint16(inWords))
	binary.LittleEndian.PutUint16(b[6:], uint16(outWords))
	binary.LittleEndian.PutUint64(b[8:], response)
	binary.LittleEndian.PutUint16(b[16:], uint16(driverIn))
	binary.LittleEndian.PutUint16(b[18:], uint16(driverOut))
	return b
}

// The commands as libibverbs writes them for the rxe provider (rdma-core 44 and 56 alike):
// where the core ends, the driver's data begins and the response goes.
func TestDecodeWhatLibibverbsWrites(t *testing.T) {
	for _, c := range []struct {
		name               string
		buf                []byte
		core, driverIn     int
		response           uint64
		coreOut, driverOut int
	}{
		{"GET_CONTEXT", command(CmdGetContext, 16, 4, 2, 0), 8, 0, 0x7fff0000, 8, 0},
		{"QUERY_DEVICE", command(CmdQueryDevice, 16, 4, 44, 0), 8, 0, 0x7fff0000, 176, 0},
		{"ALLOC_PD", command(CmdAllocPD, 16, 4, 1, 0), 8, 0, 0x7fff0000, 4, 0},
		{"DEALLOC_PD", command(CmdDeallocPD, 12, 3, 0, 0), 4, 0, 0, 0, 0},
		{"CREATE_CQ with rxe's response", command(CmdCreateCQ, 40, 10, 6, 0), 32, 0, 0x7fff0000, 8, 16},
		{"CREATE_QP with rxe's response", command(CmdCreateQP, 64, 16, 16, 0), 56, 0, 0x7fff0000, 32, 32},
		{"MODIFY_SRQ with rxe's mmap_info_addr", command(CmdModifySRQ, 32, 8, 0, 0), 16, 8, 0, 0, 0},
		{"the POST_SEND doorbell", command(CmdPostSend, 32, 8, 1, 0), 24, 0, 0x7fff0000, 4, 0},
		{"MODIFY_QP", command(CmdModifyQP, 120, 30, 0, 0), 112, 0, 0, 0, 0},
		{"EX_QUERY_DEVICE", extended(CmdExQueryDevice, 1, 38, 0x7fff0000, 0, 0), 8, 0, 0x7fff0000, 304, 0},
		{"EX_CREATE_CQ", extended(CmdExCreateCQ, 4, 2, 0x7fff0000, 0, 2), 32, 0, 0x7fff0000, 16, 16},
		// The method counts to comp_mask (52 bytes); the handler reads the whole struct (64),
		// create_flags and the rest after it.
		{"EX_CREATE_QP", extended(CmdExCreateQP, 8, 5, 0x7fff0000, 0, 4), 64, 0, 0x7fff0000, 40, 32},
		{"DESTROY_CQ 8 bytes short, as rdma-core 18 wrote it", command(CmdDestroyCQ, 16, 4, 0, 0), 16, 0, 0x7fff0000, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, errno := Decode(c.buf)
			if errno != 0 {
				t.Fatalf("refused: %v", errno)
			}
			if len(got.Core) != c.core || len(got.DriverIn) != c.driverIn || got.Response != c.response ||
				got.CoreOut != c.coreOut || got.DriverOut != c.driverOut {
				t.Fatalf("core %d, driver in %d, response %#x, out %d + %d; want %d, %d, %#x, %d + %d",
					len(got.Core), len(got.DriverIn), got.Response, got.CoreOut, got.DriverOut,
					c.core, c.driverIn, c.response, c.coreOut, c.driverOut)
			}
		})
	}
}

// Every refusal of the kernel's verify_hdr and uverbs_request, in its order, with its errno.
func TestDecodeRefusals(t *testing.T) {
	withReserved := extended(CmdExQueryDevice, 1, 38, 0x7fff0000, 0, 0)
	withReserved[20] = 1
	extraCore := extended(CmdExQueryDevice, 2, 38, 0x7fff0000, 0, 0)
	extraCore[24+8] = 1
	extraLegacy := command(CmdDeallocPD, 16, 4, 0, 0)
	extraLegacy[15] = 1
	for _, c := range []struct {
		name  string
		buf   []byte
		errno syscall.Errno
	}{
		{"shorter than the header", []byte{0, 0, 0, 0, 2, 0, 0}, syscall.EINVAL},
		{"a bit outside the command and the extended flag", command(0x100|CmdAllocPD, 16, 4, 1, 0), syscall.EINVAL},
		{"a legacy command past the last", command(41, 16, 4, 1, 0), syscall.EOPNOTSUPP},
		{"an extended command past the last", extended(FlagExtended|58, 1, 1, 1, 0, 0), syscall.EOPNOTSUPP},
		{"MODIFY_AH, which no device here serves", command(6, 16, 4, 0, 0), syscall.EOPNOTSUPP},
		{"MODIFY_AH with a wrong length", command(6, 16, 5, 0, 0), syscall.EINVAL},
		{"an extended flow command, read by the legacy rules", extended(FlagExtended|50, 2, 1, 1, 0, 0), syscall.EINVAL},
		{"in_words not the length", command(CmdAllocPD, 16, 5, 1, 0), syscall.EINVAL},
		{"a core shorter than the kernel's", command(CmdCreateCQ, 32, 8, 6, 0), syscall.ENOSPC},
		{"a response shorter than the kernel's", command(CmdQueryDevice, 16, 4, 43, 0), syscall.ENOSPC},
		{"DESTROY_CQ short and its words saying so wrongly", command(CmdDestroyCQ, 16, 6, 2, 0), syscall.EINVAL},
		{"more than the kernel knows, not zero", extraLegacy, syscall.EOPNOTSUPP},
		{"extended, shorter than its headers", command(CmdExQueryDevice, 16, 4, 1, 0), syscall.EINVAL},
		{"extended, words not the length", extended(CmdExQueryDevice, 1, 38, 0x7fff0000, 0, 0)[:31], syscall.EINVAL},
		{"extended, core short", extended(CmdExCreateCQ, 3, 2, 0x7fff0000, 0, 2), syscall.ENOSPC},
		{"extended, reserved word set", withReserved, syscall.EINVAL},
		{"extended, a response and no room for it", extended(CmdExQueryDevice, 1, 0, 0x7fff0000, 0, 0), syscall.EINVAL},
		{"extended, a response shorter than the kernel's", extended(CmdExQueryDevice, 1, 22, 0x7fff0000, 0, 0), syscall.ENOSPC},
		{"extended, room for a response and no address", extended(CmdExQueryDevice, 1, 38, 0, 0, 0), syscall.EINVAL},
		{"extended, more core than the kernel knows, not zero", extraCore, syscall.EOPNOTSUPP},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, errno := Decode(c.buf); errno != c.errno {
				t.Fatalf("errno %v, want %v", errno, c.errno)
			}
		})
	}
}

// Whatever a program writes, Decode answers without panicking, and what it accepts lies
// within what was written and has the core the kernel's size.
func FuzzDecode(f *testing.F) {
	f.Add(command(CmdCreateQP, 64, 16, 16, 0))
	f.Add(command(CmdModifySRQ, 32, 8, 0, 0))
	f.Add(command(CmdDestroyCQ, 16, 4, 0, 0))
	f.Add(extended(CmdExCreateCQ, 4, 2, 0x7fff0000, 0, 2))
	f.Add(extended(CmdExCreateQP, 8, 5, 0x7fff0000, 1, 4))
	f.Fuzz(func(t *testing.T, buf []byte) {
		c, errno := Decode(buf)
		if errno != 0 {
			return
		}
		if len(c.Core) < c.Method.Req || len(c.Core) > max(c.Method.Req, exStructSize[c.Num]) {
			t.Fatalf("%s: core of %d bytes, the kernel's is %d (its struct %d)", c.Method.Name, len(c.Core), c.Method.Req, exStructSize[c.Num])
		}
		if len(c.Core)+len(c.DriverIn) > len(buf) && !(c.Num == CmdDestroyCQ && len(buf) == 16) {
			t.Fatalf("%s: %d + %d bytes out of %d written", c.Method.Name, len(c.Core), len(c.DriverIn), len(buf))
		}
		if c.Response != 0 && c.CoreOut < c.Method.Resp && c.Num != CmdDestroyCQ {
			t.Fatalf("%s: room for %d response bytes, the kernel writes %d", c.Method.Name, c.CoreOut, c.Method.Resp)
		}
	})
}
