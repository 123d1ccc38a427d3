package qtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// qemuBinary finds the QEMU vm/provision.sh provisions: $VM_DIR/bin/qemu-system-x86_64, VM_DIR
// defaulting to vm/lib.sh's default. Without it the test skips, unless SOFTIRDMA_INTEROP is set
// (make interop provisions first and sets it), where a missing QEMU is a failure.
func qemuBinary(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("VM_DIR")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			cache = filepath.Join(os.Getenv("HOME"), ".cache")
		}
		dir = filepath.Join(cache, "softirdma-vm")
	}
	p := filepath.Join(dir, "bin", "qemu-system-x86_64")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("SOFTIRDMA_INTEROP") != "" {
			t.Fatalf("QEMU is not provisioned at %s: %v", p, err)
		}
		t.Skipf("QEMU is not provisioned at %s: run `sudo vm/provision.sh` (or `make interop`), or set VM_DIR", p)
	}
	return p
}

// shortDir makes a directory for sockets whose path stays well inside a unix socket's limit,
// which t.TempDir's long names may not.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "qt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// startQEMU starts a machine for the test and closes it when the test ends.
func startQEMU(t testing.TB, cfg Config) *Machine {
	t.Helper()
	cfg.QEMU = qemuBinary(t)
	if cfg.Dir == "" {
		cfg.Dir = shortDir(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// virtioRNG starts QEMU with a virtio-rng-pci at slot 3 and returns it found, its BARs
// assigned and decoding enabled (bus mastering as master says).
func virtioRNG(tb testing.TB, master bool) (*Machine, *Function, [6]BAR) {
	tb.Helper()
	m := startQEMU(tb, Config{Devices: []string{`{"driver":"virtio-rng-pci","addr":"0x3"}`}})
	f, err := NewPCI(m).Find(0, 0x1af4, 0x1005)
	if err != nil {
		tb.Fatal(err)
	}
	bars, err := f.AssignBARs()
	if err != nil {
		tb.Fatal(err)
	}
	if err := f.Enable(master); err != nil {
		tb.Fatal(err)
	}
	return m, f, bars
}
