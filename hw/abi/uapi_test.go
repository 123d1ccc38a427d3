package abi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// uapiField is one member of a Linux UAPI structure and where the ABI puts it.
type uapiField struct {
	cStruct, member string
	off, size       int
}

// uapiFields are the members of rdma/rdma_user_rxe.h and ib_user_verbs.h the device and the
// rxe provider share, by their C names: a renamed member (num_sge became reserved) fails to
// compile, a moved one fails its assertion.
var uapiFields = []uapiField{
	{"rxe_queue_buf", "log2_elem_size", QHLogElemSize, 4},
	{"rxe_queue_buf", "index_mask", QHIndexMask, 4},
	{"rxe_queue_buf", "producer_index", QHProducer, 4},
	{"rxe_queue_buf", "consumer_index", QHConsumer, 4},
	{"rxe_queue_buf", "data", QueueHeaderSize, 0},
	{"rxe_send_wqe", "wr.wr_id", SendWRID, 8},
	{"rxe_send_wqe", "wr.reserved", SendReserved, 4},
	{"rxe_send_wqe", "wr.opcode", SendOpcode, 4},
	{"rxe_send_wqe", "wr.send_flags", SendFlags, 4},
	{"rxe_send_wqe", "wr.ex.imm_data", SendImm, 4},
	{"rxe_send_wqe", "wr.ex.invalidate_rkey", SendImm, 4},
	{"rxe_send_wqe", "wr.wr", SendWRUnion, SendStatus - SendWRUnion},
	{"rxe_send_wqe", "wr.wr.rdma.remote_addr", SendRemote, 8},
	{"rxe_send_wqe", "wr.wr.rdma.rkey", SendRKey, 4},
	{"rxe_send_wqe", "wr.wr.atomic.remote_addr", SendRemote, 8},
	{"rxe_send_wqe", "wr.wr.atomic.compare_add", SendCompare, 8},
	{"rxe_send_wqe", "wr.wr.atomic.swap", SendSwap, 8},
	{"rxe_send_wqe", "wr.wr.atomic.rkey", SendAtomRKey, 4},
	{"rxe_send_wqe", "wr.wr.ud.remote_qpn", SendRemoteQPN, 4},
	{"rxe_send_wqe", "wr.wr.ud.remote_qkey", SendRemoteQKey, 4},
	{"rxe_send_wqe", "wr.wr.ud.pkey_index", SendPKeyIndex, 2},
	{"rxe_send_wqe", "wr.wr.ud.ah_num", SendAHNum, 4},
	{"rxe_send_wqe", "wr.wr.ud.av", SendAV, RXEAVSize},
	{"rxe_send_wqe", "wr.wr.mw.addr", SendMWAddr, 8},
	{"rxe_send_wqe", "wr.wr.mw.length", SendMWLength, 8},
	{"rxe_send_wqe", "wr.wr.mw.mr_lkey", SendMWMRLKey, 4},
	{"rxe_send_wqe", "wr.wr.mw.mw_rkey", SendMWRKey, 4},
	{"rxe_send_wqe", "wr.wr.mw.rkey", SendMWNewRKey, 4},
	{"rxe_send_wqe", "wr.wr.mw.access", SendMWAccess, 4},
	{"rxe_send_wqe", "status", SendStatus, 4},
	{"rxe_send_wqe", "state", SendState, 4},
	{"rxe_send_wqe", "iova", SendIOVA, 8},
	{"rxe_send_wqe", "mask", SendMask, 4},
	{"rxe_send_wqe", "first_psn", SendFirstPSN, 4},
	{"rxe_send_wqe", "last_psn", SendLastPSN, 4},
	{"rxe_send_wqe", "ack_length", SendAckLength, 4},
	{"rxe_send_wqe", "ssn", SendSSN, 4},
	{"rxe_send_wqe", "has_rd_atomic", SendRdAtomic, 4},
	{"rxe_send_wqe", "dma.length", SendDMALength, 4},
	{"rxe_send_wqe", "dma.resid", SendDMAResid, 4},
	{"rxe_send_wqe", "dma.cur_sge", SendDMACurSGE, 4},
	{"rxe_send_wqe", "dma.num_sge", SendDMANumSGE, 4},
	{"rxe_send_wqe", "dma.sge_offset", SendDMAOffset, 4},
	{"rxe_send_wqe", "dma.sge", SendSGEs, 0},
	{"rxe_send_wqe", "dma.inline_data", SendSGEs, 0},
	{"rxe_recv_wqe", "wr_id", RecvWRID, 8},
	{"rxe_recv_wqe", "reserved", RecvReserved, 4},
	{"rxe_recv_wqe", "dma.length", RecvDMALength, 4},
	{"rxe_recv_wqe", "dma.num_sge", RecvDMANumSGE, 4},
	{"rxe_recv_wqe", "dma.sge", RecvSGEs, 0},
	{"rxe_sge", "addr", SGEAddr, 8},
	{"rxe_sge", "length", SGELength, 4},
	{"rxe_sge", "lkey", SGELKey, 4},
	{"ib_uverbs_wc", "wr_id", CQEWRID, 8},
	{"ib_uverbs_wc", "status", CQEStatus, 4},
	{"ib_uverbs_wc", "opcode", CQEOpcode, 4},
	{"ib_uverbs_wc", "vendor_err", CQEVendorErr, 4},
	{"ib_uverbs_wc", "byte_len", CQEByteLen, 4},
	{"ib_uverbs_wc", "ex.imm_data", CQEImm, 4},
	{"ib_uverbs_wc", "ex.invalidate_rkey", CQEImm, 4},
	{"ib_uverbs_wc", "qp_num", CQEQPNum, 4},
	{"ib_uverbs_wc", "src_qp", CQESrcQP, 4},
	{"ib_uverbs_wc", "wc_flags", CQEWCFlags, 4},
	{"ib_uverbs_wc", "pkey_index", CQEPKeyIndex, 2},
	{"ib_uverbs_wc", "slid", CQESLID, 2},
	{"ib_uverbs_wc", "sl", CQESL, 1},
	{"ib_uverbs_wc", "dlid_path_bits", CQEDLIDPath, 1},
	{"ib_uverbs_wc", "port_num", CQEPortNum, 1},
}

// linux62Fields came with Linux 6.2's FLUSH and ATOMIC_WRITE: headers older than that lack them.
var linux62Fields = []uapiField{
	{"rxe_send_wqe", "dma.atomic_wr", SendAtomicWr, 0},
	{"rxe_send_wqe", "wr.wr.flush.remote_addr", SendRemote, 8},
	{"rxe_send_wqe", "wr.wr.flush.length", SendFlushLen, 4},
	{"rxe_send_wqe", "wr.wr.flush.rkey", SendFlushRKey, 4},
	{"rxe_send_wqe", "wr.wr.flush.type", SendFlushType, 1},
	{"rxe_send_wqe", "wr.wr.flush.level", SendFlushLvl, 1},
}

// uapiProgram asserts each field's offset and size in C.
func uapiProgram(fields []uapiField) string {
	var b strings.Builder
	b.WriteString("#include <stddef.h>\n#include <rdma/rdma_user_rxe.h>\n#include <rdma/ib_user_verbs.h>\n")
	b.WriteString("#define SIZE(s, m) sizeof(((struct s *)0)->m)\n")
	for _, f := range fields {
		fmt.Fprintf(&b, "_Static_assert(offsetof(struct %s, %s) == %d, \"%s.%s is not at %d\");\n", f.cStruct, f.member, f.off, f.cStruct, f.member, f.off)
		if f.size > 0 {
			fmt.Fprintf(&b, "_Static_assert(SIZE(%s, %s) == %d, \"%s.%s is not %d bytes\");\n", f.cStruct, f.member, f.size, f.cStruct, f.member, f.size)
		}
	}
	return b.String()
}

// compileC compiles src with gcc (-fsyntax-only) and the extra flags.
func compileC(t *testing.T, src string, flags ...string) ([]byte, error) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatal("gcc is needed to check the layouts against Linux's headers: ", err)
	}
	file := filepath.Join(t.TempDir(), "uapi.c")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return exec.Command(gcc, append(append([]string{"-std=c11", "-fsyntax-only"}, flags...), file)...).CombinedOutput()
}

// The device reads the rings at the offsets Linux's UAPI headers give, member by member, under
// the members' own names (the headers libc's development package installs; FLUSH's only where
// they are new enough to have it).
func TestLayoutsMatchLinuxUAPI(t *testing.T) {
	if out, err := compileC(t, uapiProgram(uapiFields)); err != nil {
		t.Fatalf("the layouts disagree with <rdma/rdma_user_rxe.h> and <rdma/ib_user_verbs.h>:\n%s", out)
	}
	// The VM root vm/provision.sh makes (Debian trixie) has a header new enough, when it is here.
	vmDir := os.Getenv("VM_DIR")
	if vmDir == "" {
		if home, err := os.UserCacheDir(); err == nil {
			vmDir = filepath.Join(home, "softirdma-vm")
		}
	}
	if h, err := os.ReadFile(filepath.Join(vmDir, "root/usr/include/rdma/rdma_user_rxe.h")); err == nil {
		inc := t.TempDir()
		if err := os.MkdirAll(filepath.Join(inc, "rdma"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(inc, "rdma/rdma_user_rxe.h"), h, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := compileC(t, uapiProgram(append(uapiFields, linux62Fields...)), "-I", inc); err != nil {
			t.Fatalf("the layouts disagree with the VM root's (Debian trixie) <rdma/rdma_user_rxe.h>:\n%s", out)
		}
	}
	probe := "#include <stddef.h>\n#include <rdma/rdma_user_rxe.h>\nsize_t x = offsetof(struct rxe_send_wqe, wr.wr.flush);\n"
	if _, err := compileC(t, probe); err != nil {
		t.Log("the installed <rdma/rdma_user_rxe.h> predates FLUSH and ATOMIC_WRITE (Linux 6.2): TestFlushLayoutAssertions checks their offsets")
		return
	}
	if out, err := compileC(t, uapiProgram(linux62Fields)); err != nil {
		t.Fatalf("the FLUSH and ATOMIC_WRITE fields disagree with <rdma/rdma_user_rxe.h>:\n%s", out)
	}
}

// The FLUSH fields where Linux 6.2+ puts them (struct { u64 remote_addr; u32 length; u32 rkey;
// u8 type; u8 level; } flush, in rxe_send_wr's union after its 24-byte head), checked by the
// compiler against a structure of that shape, since older installed headers lack it.
func TestFlushLayoutAssertions(t *testing.T) {
	var b strings.Builder
	b.WriteString("#include <stddef.h>\n#include <stdint.h>\n")
	b.WriteString("struct shaped { uint64_t wr_id; uint32_t reserved, opcode, send_flags, ex;\n")
	b.WriteString("  union { struct { uint64_t remote_addr; uint32_t length, rkey; uint8_t type, level; } flush; uint8_t size[120]; } wr; };\n")
	for _, f := range linux62Fields {
		if m, ok := strings.CutPrefix(f.member, "wr.wr."); ok {
			fmt.Fprintf(&b, "_Static_assert(offsetof(struct shaped, wr.%s) == %d, \"%s\");\n", m, f.off, m)
			fmt.Fprintf(&b, "_Static_assert(sizeof(((struct shaped *)0)->wr.%s) == %d, \"%s size\");\n", m, f.size, m)
		}
	}
	if out, err := compileC(t, b.String()); err != nil {
		t.Fatalf("%s\n%s", out, b.String())
	}
}
