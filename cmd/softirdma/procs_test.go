package main

import (
	"runtime"
	"strings"
	"testing"
)

// -procs sets GOMAXPROCS; 0 leaves Go's own setting, which it reports.
func TestServeProcs(t *testing.T) {
	goDefault := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(goDefault) })
	for _, c := range []struct{ procs, want int }{{0, goDefault}, {1, 1}, {3, 3}, {0, 3}} {
		if got := setProcs(c.procs); got != c.want || runtime.GOMAXPROCS(0) != c.want {
			t.Errorf("setProcs(%d) = %d, runtime at %d; want %d", c.procs, got, runtime.GOMAXPROCS(0), c.want)
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
