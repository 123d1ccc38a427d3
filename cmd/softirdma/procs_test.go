package main

import (
	"runtime"
	"strings"
	"testing"
)

// -procs sets GOMAXPROCS; 0 leaves the setting as it was.
func TestServeProcs(t *testing.T) {
	goDefault := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(goDefault) })
	for _, c := range []struct{ procs, want int }{{0, goDefault}, {1, 1}, {3, 3}, {0, 3}} {
		if setProcs(c.procs); runtime.GOMAXPROCS(0) != c.want {
			t.Errorf("setProcs(%d): runtime at %d, want %d", c.procs, runtime.GOMAXPROCS(0), c.want)
		}
	}
}

// -procs is checked before serve does anything.
func TestServeRefusesProcsOutOfRange(t *testing.T) {
	for _, v := range []string{"-1", "1025"} {
		code, _, errOut := runCLI("serve", "-procs", v, "-socket", t.TempDir()+"/s.sock")
		if code != 2 || !strings.Contains(errOut, "-procs "+v+" is out of range (0..1024)") {
			t.Errorf("serve -procs %s: exit %d, %q; want 2 and the range", v, code, errOut)
		}
	}
}
