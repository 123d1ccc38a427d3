package cheader

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const headerPath = "../../linux/softirdma_abi.h"

// The committed header is what the Go package generates today: change hw/abi, run
// `go generate ./hw/abi`.
func TestHeaderIsCurrent(t *testing.T) {
	consts, err := ConstsFromSource("..")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := Generate(&want, consts); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(headerPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%s is stale: run go generate ./hw/abi", headerPath)
	}
}

// A C compiler agrees with the Go offsets: the header's static assertions hold (make test needs
// gcc anyway, for the race detector).
func TestHeaderCompiles(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatal("gcc is needed to check the C header's layouts: ", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "t.c")
	inc, _ := filepath.Abs(filepath.Dir(headerPath))
	prog := "#include \"softirdma_abi.h\"\nint main(void) { return SOFTIRDMA_CTRL_ENTRY_SIZE == sizeof(struct softirdma_ctrl_entry) ? 0 : 1; }\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "t")
	if out, err := exec.Command(gcc, "-std=c11", "-Wall", "-Werror", "-I", inc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin).CombinedOutput(); err != nil {
		t.Fatalf("the control entry's size differs in C: %v %s", err, out)
	}
}

func TestCName(t *testing.T) {
	for in, want := range map[string]string{
		"PCIVendorID": "PCI_VENDOR_ID", "PBAOffset": "PBA_OFFSET", "RegCtrlQBaseL": "REG_CTRL_Q_BASE_L",
		"QPAttrDGID": "QP_ATTR_DGID", "SendAHNum": "SEND_AH_NUM", "Version": "VERSION",
		"CQEQPNum": "CQE_QP_NUM", "AVPD": "AV_PD", "CreateQPPD": "CREATE_QP_PD", "CQEPKeyIndex": "CQE_PKEY_INDEX",
		"SendMWRKey": "SEND_MW_RKEY", "SendMWMRLKey": "SEND_MW_MR_LKEY", "CQEWRID": "CQE_WR_ID",
		"RecvDMANumSGE": "RECV_DMA_NUM_SGE", "OpAllocSTag": "OP_ALLOC_STAG", "QPAttrRQPSN": "QP_ATTR_RQ_PSN",
		"CQEDLIDPath": "CQE_DLID_PATH", "MaxQPWR": "MAX_QP_WR", "CapMWType2A": "CAP_MW_TYPE2_A",
		"QHLogElemSize": "QH_LOG_ELEM_SIZE", "MSIXTableOffset": "MSIX_TABLE_OFFSET", "WROpRegMR": "WR_OP_REG_MR",
	} {
		if got := cName(in); got != want {
			t.Errorf("cName(%q) = %q, want %q", in, got, want)
		}
	}
}
