package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/softirdma/softirdma/host/nldev"
	"github.com/softirdma/softirdma/host/sysfs"
)

// Beside the kernel's devices softirdma's take the names they leave, and the joined tree links to
// the kernel's entries while softirdma's own tree has none of them.
func TestKernelDevicesBeside(t *testing.T) {
	kd := kernelDevices{devs: []nldev.KernelDevice{{Index: 1, Name: "rxe0", Uverbs: "uverbs0"}, {Index: 2, Name: "mlx5_0", Uverbs: "uverbs1"}}}
	if got := kd.freeName("rxe0"); got != "rxe1" {
		t.Errorf("freeName(rxe0) beside the kernel's rxe0 = %s, want rxe1", got)
	}
	if got := (kernelDevices{}).freeName("rxe0"); got != "rxe0" {
		t.Errorf("freeName(rxe0) with no kernel devices = %s", got)
	}
	dir := t.TempDir()
	tree := sysfs.Build([]sysfs.Device{{Name: "rxe1", Uverbs: "uverbs2", UverbsDev: "231:194", Ports: []sysfs.Port{{Active: true}}}})
	if err := kd.writeTrees(dir, tree); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, link string
	}{
		{"sys-kernel/class/infiniband/rxe0", "/sys/class/infiniband/rxe0"},
		{"sys-kernel/class/infiniband/mlx5_0", "/sys/class/infiniband/mlx5_0"},
		{"sys-kernel/class/infiniband_verbs/uverbs1", "/sys/class/infiniband_verbs/uverbs1"},
	} {
		if got, err := os.Readlink(filepath.Join(dir, c.path)); err != nil || got != c.link {
			t.Errorf("%s links to %q (%v), want %s", c.path, got, err, c.link)
		}
	}
	for _, sub := range []string{"sys", "sys-kernel"} {
		if st, err := os.Lstat(filepath.Join(dir, sub, "class/infiniband_verbs/uverbs2")); err != nil || !st.IsDir() {
			t.Errorf("%s has no folder uverbs2 of softirdma's (%v)", sub, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "sys/class/infiniband/rxe0")); !os.IsNotExist(err) {
		t.Errorf("softirdma's own tree shows the kernel's rxe0 (%v)", err)
	}
}
