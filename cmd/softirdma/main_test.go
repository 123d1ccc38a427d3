package main

import (
	"bytes"
	"strings"
	"testing"
)

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := dispatch(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, _ := runCLI(args...)
		if code != 0 || !strings.Contains(out, "usage: softirdma <command>") || !strings.Contains(out, "demo") {
			t.Fatalf("%v: exit %d, output %q", args, code, out)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runCLI(args...)
		if code != 0 || !strings.HasPrefix(out, "softirdma ") {
			t.Fatalf("%v: exit %d, output %q", args, code, out)
		}
	}
	if code, _, errOut := runCLI("frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: exit %d, %q", code, errOut)
	}
	if code, _, _ := runCLI(); code != 2 {
		t.Fatalf("no command: exit %d", code)
	}
}

func TestDemo(t *testing.T) {
	code, out, errOut := runCLI("demo")
	if code != 0 || strings.Contains(out, "FAIL") || !strings.Contains(out, "steps got the expected result") {
		t.Fatalf("demo exit %d\n%s%s", code, out, errOut)
	}
	// The same seed gives the same run, a different seed different keys; both flag spellings work.
	_, a, _ := runCLI("demo", "-seed", "7")
	_, b, _ := runCLI("demo", "--seed", "7")
	_, c, _ := runCLI("demo", "-seed=8")
	if a != b {
		t.Fatal("same seed, different output")
	}
	if a == c {
		t.Fatal("different seeds, same keys")
	}
	if code, _, _ := runCLI("demo", "-seed", "x"); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
	if code, _, _ := runCLI("demo", "-h"); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
}
