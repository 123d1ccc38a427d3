package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/softirdma/softirdma/host/hostdev"
	"github.com/softirdma/softirdma/host/nldev"
	"github.com/softirdma/softirdma/host/sysfs"
)

// kernelDevices is what a softirdma of the host path (hostd, serve -host) learns at its start
// of the host's own RDMA devices: the kernel's netlink, to relay a program's requests about
// them when it asks to see them (softirdma run -kernel); their names, which softirdma's avoid;
// and their numbers, after which softirdma's come, so that one list can hold both.
type kernelDevices struct {
	netlink                 *nldev.KernelNetlink // nil: the kernel has none
	devs                    []nldev.KernelDevice
	firstIndex, firstUverbs uint32
}

// findKernelDevices asks the kernel for its RDMA devices. A kernel without ib_core, or with no
// device, has none to join.
func findKernelDevices(log *slog.Logger) kernelDevices {
	k, devs, err := nldev.OpenKernel()
	if err != nil {
		log.Debug("no kernel RDMA netlink", "err", err)
		return kernelDevices{}
	}
	if len(devs) == 0 {
		k.Close()
		return kernelDevices{}
	}
	kd := kernelDevices{netlink: k, devs: devs}
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
		kd.firstIndex = max(kd.firstIndex, d.Index+1)
		if n := nldev.UverbsNumber(d.Uverbs); n >= 0 {
			kd.firstUverbs = max(kd.firstUverbs, uint32(n)+1)
		}
	}
	log.Info("the kernel's RDMA devices: programs under softirdma run -kernel see them beside softirdma's", "devices", names)
	return kd
}

// config is cfg for devices beside the kernel's: numbered after them, with the relay to them
// (none when there is nothing to join).
func (kd kernelDevices) config(cfg hostdev.Config) hostdev.Config {
	cfg.FirstIndex, cfg.FirstUverbs = kd.firstIndex, kd.firstUverbs
	if kd.netlink != nil {
		cfg.Kernel = kd.netlink
	}
	return cfg
}

// has says whether the kernel has a device of that name.
func (kd kernelDevices) has(name string) bool {
	return slices.ContainsFunc(kd.devs, func(d nldev.KernelDevice) bool { return d.Name == name })
}

// freeName is want, or the first rxeN the kernel's devices leave free.
func (kd kernelDevices) freeName(want string) string {
	for n := 0; kd.has(want); n++ {
		want = fmt.Sprintf("rxe%d", n)
	}
	return want
}

// writeTrees lays out softirdma's sysfs tree in DIR/sys, and in DIR/sys-kernel the same with
// the kernel's devices beside it: links to the kernel's own entries, which programs under
// softirdma run -kernel read.
func (kd kernelDevices) writeTrees(dir string, tree sysfs.Tree) error {
	for _, sub := range []string{"sys", "sys-kernel"} {
		root := filepath.Join(dir, sub)
		if err := os.RemoveAll(root); err != nil {
			return err
		}
		if err := tree.WriteTo(root); err != nil {
			return err
		}
	}
	joined := filepath.Join(dir, "sys-kernel", "class")
	for _, d := range kd.devs {
		links := map[string]string{filepath.Join("infiniband", d.Name): filepath.Join("/sys/class/infiniband", d.Name)}
		if d.Uverbs != "" {
			links[filepath.Join("infiniband_verbs", d.Uverbs)] = filepath.Join("/sys/class/infiniband_verbs", d.Uverbs)
		}
		for at, to := range links {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(joined, at)), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(to, filepath.Join(joined, at)); err != nil {
				return err
			}
		}
	}
	return nil
}

// close closes the relay.
func (kd kernelDevices) close() {
	if kd.netlink != nil {
		kd.netlink.Close()
	}
}
