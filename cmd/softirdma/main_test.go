package main

import (
	"bytes"
	"os"
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

// The banner names every transport the card has, not RC alone.
func TestBannerTransports(t *testing.T) {
	_, out, _ := runCLI("help")
	banner, _, _ := strings.Cut(out, "\n")
	if strings.Contains(banner, "RC transport") || !strings.Contains(banner, "RC, UC and UD") || !strings.Contains(banner, "GSI") {
		t.Fatalf("banner %q", banner)
	}
}

// help takes help as any other command, and an unknown command gets one line that lists the
// commands rather than the whole banner.
func TestHelpOfHelp(t *testing.T) {
	code, out, errOut := runCLI("help", "help")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: softirdma help [COMMAND]\n") {
		t.Errorf("help help: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI("help", "frobnicate")
	want := `softirdma help: no command "frobnicate"; the commands are decode, demo, doctor, env, fault, hostd, links, perf, pingpong, rping, run, serve, status, stop, ucmatose, udaddy, version` + "\n"
	if code != 2 || out != "" || errOut != want {
		t.Errorf("help frobnicate: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	code, _, errOut = runCLI("help", "serve", "fault")
	if code != 2 || errOut != "softirdma help: one command at a time, got \"serve\" and \"fault\"\n" {
		t.Errorf("help serve fault: exit %d, stderr %q", code, errOut)
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
	if withoutWallTime(a) != withoutWallTime(b) {
		t.Fatal("same seed, different output")
	}
	if a == c {
		t.Fatal("different seeds, same keys")
	}
	// With loss the results stay the same and the pcap is byte-identical for the same seed.
	dir := t.TempDir()
	for _, f := range []string{"1.pcap", "2.pcap"} {
		code, out, _ := runCLI("demo", "-seed", "3", "-loss", "0.2", "-pcap", dir+"/"+f)
		if code != 0 || !strings.Contains(out, "retransmissions") || strings.Contains(out, "retransmissions 0,") {
			t.Fatalf("lossy demo: exit %d\n%s", code, out)
		}
	}
	p1, err1 := os.ReadFile(dir + "/1.pcap")
	p2, err2 := os.ReadFile(dir + "/2.pcap")
	if err1 != nil || err2 != nil || len(p1) < 1000 || !bytes.Equal(p1, p2) {
		t.Fatalf("pcaps differ or are missing (%v %v, %d and %d bytes)", err1, err2, len(p1), len(p2))
	}
	if code, out, _ := runCLI("decode", dir+"/1.pcap"); code != 0 || !strings.Contains(out, "icrc_bad=0 malformed=0") {
		t.Fatalf("decode of the demo's pcap: exit %d\n%s", code, out)
	}
	if code, _, _ := runCLI("demo", "-seed", "x"); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
	if code, _, _ := runCLI("demo", "-h"); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
}

// withoutWallTime drops the one line of the demo that depends on the machine.
func withoutWallTime(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "wall time") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func TestLinksAndDoctor(t *testing.T) {
	for mtu, want := range map[int]int{1500: 1024, 9000: 4096, 1400: 1024, 1104: 1024, 1103: 512, 300: 0, 4176: 4096, 4175: 2048} {
		if got := pathMTU(mtu); got != want {
			t.Fatalf("pathMTU(%d) = %d, want %d", mtu, got, want)
		}
	}
	code, out, _ := runCLI("links")
	if code != 0 || !strings.Contains(out, "lo (index 1): up") || !strings.Contains(out, "gid[1] ::ffff:127.0.0.1") {
		t.Fatalf("links: %d\n%s", code, out)
	}
	code, out, _ = runCLI("doctor", "lo")
	if !strings.Contains(out, "path MTU 4096") || !strings.Contains(out, "packet socket on lo") {
		t.Fatalf("doctor lo: %d\n%s", code, out)
	}
	if code, _, _ := runCLI("doctor", "no-such-adapter"); code != 1 {
		t.Fatalf("doctor on a missing adapter: exit %d", code)
	}
}
