package main

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
)

// -procs N sets GOMAXPROCS; 0 leaves the setting as it was.
func TestServeProcs(t *testing.T) {
	goDefault := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(goDefault) })
	for _, c := range []struct{ procs, want int }{{0, goDefault}, {1, 1}, {3, 3}, {0, 3}} {
		if setProcs(c.procs); runtime.GOMAXPROCS(0) != c.want {
			t.Errorf("setProcs(%d): runtime at %d, want %d", c.procs, runtime.GOMAXPROCS(0), c.want)
		}
	}
}

// -procs auto (the default) runs serve on one processor to begin with, and gives back the setting
// it found when serve ends; a number is set for good.
func TestServeProcsAuto(t *testing.T) {
	goDefault := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(goDefault) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runtime.GOMAXPROCS(3)
	var f serveFlags
	f.register(newFlagSet("serve", io.Discard))
	p := f.procs
	if p.String() != "auto" {
		t.Fatalf("-procs default %q, want auto", p.String())
	}
	stop := governProcs(context.Background(), log, p)
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("-procs auto: runtime at %d to begin with, want 1", got)
	}
	stop()
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("-procs auto ended: runtime at %d, want the 3 it found", got)
	}
	if err := p.Set("2"); err != nil || p.String() != "2" {
		t.Fatalf("-procs 2: %v, %q", err, p.String())
	}
	governProcs(context.Background(), log, p)()
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Errorf("-procs 2: runtime at %d, want 2", got)
	}
}

// -procs is checked before serve does anything.
func TestServeRefusesProcsOutOfRange(t *testing.T) {
	for _, v := range []string{"-1", "1025"} {
		code, _, errOut := runCLI("serve", "-procs", v, "-socket", t.TempDir()+"/s.sock")
		if code != 2 || !strings.Contains(errOut, "-procs "+v+" is out of range (auto or 0..1024)") {
			t.Errorf("serve -procs %s: exit %d, %q; want 2 and the range", v, code, errOut)
		}
	}
	code, _, errOut := runCLI("serve", "-procs", "many", "-socket", t.TempDir()+"/s.sock")
	if code != 2 || !strings.Contains(errOut, `invalid value "many" for flag -procs: want auto or a number of CPUs`) {
		t.Errorf("serve -procs many: exit %d, %q; want 2 and what it takes", code, errOut)
	}
}
