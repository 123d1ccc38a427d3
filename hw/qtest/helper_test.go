package qtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// qemuBinary finds the rig's QEMU: $RIG_DIR/bin/qemu-system-x86_64, RIG_DIR defaulting to the
// rig's own default. Without it the test skips, unless SOFTIRDMA_INTEROP is set (make interop
// provisions the rig first and sets it), where a missing QEMU is a failure.
func qemuBinary(t testing.TB) string {
	t.Helper()
	rig := os.Getenv("RIG_DIR")
	if rig == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			cache = filepath.Join(os.Getenv("HOME"), ".cache")
		}
		rig = filepath.Join(cache, "softirdma-rig")
	}
	p := filepath.Join(rig, "bin", "qemu-system-x86_64")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("SOFTIRDMA_INTEROP") != "" {
			t.Fatalf("QEMU is not provisioned at %s: %v", p, err)
		}
		t.Skipf("QEMU is not provisioned at %s: run `bash ../shared/rig/ensure.sh` (or `make interop`), or set RIG_DIR", p)
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
