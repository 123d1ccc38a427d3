package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// demoFixed runs the demo with a wall clock that stands still and a fixed way to run the program
// again, so that its output depends only on its flags.
func demoFixed(self string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	code := demoMain(args, &out, &errOut, demoEnv{self: self, now: func() time.Time { return t0 }})
	return code, out.String(), errOut.String()
}

func TestDemoRefusesBadLossAndSeed(t *testing.T) {
	for _, loss := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "-0.01", "0.51", "1", "1e400", "0x1p-1x"} {
		code, out, errOut := demoFixed("softirdma", "-loss", loss)
		if code != 2 || out != "" || !strings.Contains(errOut, "-loss") {
			t.Errorf("-loss %s: exit %d, stdout %q, stderr %q", loss, code, out, errOut)
		}
	}
	// A value that parses but is out of range gets one line that names the flag and the range.
	for _, loss := range []string{"NaN", "Inf", "-Inf", "-0.01", "0.51"} {
		_, _, errOut := demoFixed("softirdma", "-loss", loss)
		if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "-loss must be a probability from 0 to 0.5") {
			t.Errorf("-loss %s: stderr %q", loss, errOut)
		}
	}
	for _, seed := range []string{"-1", "x", "1.5", "18446744073709551616"} {
		if code, out, errOut := demoFixed("softirdma", "-seed", seed); code != 2 || out != "" || !strings.Contains(errOut, "-seed") {
			t.Errorf("-seed %s: exit %d, stdout %q, stderr %q", seed, code, out, errOut)
		}
	}
	// The ends of both ranges are accepted.
	for _, args := range [][]string{{"-loss", "0"}, {"-loss", "0.5", "-seed", "0"}, {"-seed", "18446744073709551615"}} {
		if code, out, errOut := demoFixed("softirdma", args...); code != 0 {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

func TestDemoDecodeHint(t *testing.T) {
	for argv0, want := range map[string]string{
		"/tmp/go-build3013/b001/exe/softirdma": "go run ./cmd/softirdma",
		"":                                     "go run ./cmd/softirdma",
		"bin/softirdma":                        "bin/softirdma",
		"softirdma":                            "softirdma",
		"/opt/my tools/softirdma":              "'/opt/my tools/softirdma'",
	} {
		if got := selfCommand(argv0); got != want {
			t.Errorf("selfCommand(%q) = %q, want %q", argv0, got, want)
		}
	}
	// After the README's go run, the hint is a command that works from the same directory.
	pcap := t.TempDir() + "/demo.pcap"
	code, out, _ := demoFixed(selfCommand("/tmp/go-build1/b001/exe/softirdma"), "-pcap", pcap)
	want := "every frame is in " + pcap + ": go run ./cmd/softirdma decode " + pcap + " (make build gives bin/softirdma), or open it in Wireshark\n"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want %q in\n%s", code, want, out)
	}
	if strings.Contains(out, ": softirdma decode") {
		t.Fatalf("the hint names a command that is not on the PATH:\n%s", out)
	}
	// Run by the path make build gives, the hint uses that path; odd file names are quoted.
	odd := t.TempDir() + "/it's here.pcap"
	_, out, _ = demoFixed("bin/softirdma", "-pcap", odd)
	if want := `: bin/softirdma decode '` + strings.ReplaceAll(odd, "'", `'\''`) + `', or open it in Wireshark`; !strings.Contains(out, want) {
		t.Fatalf("want %q in\n%s", want, out)
	}
	// The hint decodes the capture.
	if code, out, _ := runCLI("decode", pcap); code != 0 || !strings.Contains(out, "icrc_bad=0 malformed=0") {
		t.Fatalf("decode %s: exit %d\n%s", pcap, code, out)
	}
}

var demoSeeds = flag.Int("demo.seeds", 0, "seeds per loss for TestDemoManySeeds, at every loss from 0 to 0.5 in steps of 0.1 (default: 100 at 0.1, 0.3 and 0.5; 20 with -short)")

// TestDemoManySeeds runs the demo over many seeds and losses: every run must get every step's
// expected result, and a second run of the same seed must print the same bytes and write the same
// pcap. Across the seeds at loss 0.5 both outcomes of the stale rkey must turn up, and a lost
// connection on an ordinary step.
func TestDemoManySeeds(t *testing.T) {
	n, losses := 100, []string{"0.1", "0.3", "0.5"}
	if testing.Short() {
		n = 20
	}
	if *demoSeeds > 0 {
		n, losses = *demoSeeds, []string{"0", "0.1", "0.2", "0.3", "0.4", "0.5"}
	}
	dirs := [2]string{t.TempDir(), t.TempDir()}
	for _, loss := range losses {
		failed := 0
		var nakLost, nakArrived, reconnected int
		for seed := 1; seed <= n; seed++ {
			var outs [2]string
			var pcaps [2][]byte
			for i := range outs {
				pcap := dirs[i] + "/demo.pcap"
				code, out, errOut := demoFixed("softirdma", "-seed", fmt.Sprint(seed), "-loss", loss, "-pcap", pcap)
				if code != 0 {
					failed++
					if failed <= 3 {
						t.Errorf("seed %d, loss %s: exit %d\n%s%s", seed, loss, code, out, errOut)
					}
					break
				}
				p, err := os.ReadFile(pcap)
				if err != nil {
					t.Fatal(err)
				}
				outs[i], pcaps[i] = strings.ReplaceAll(out, dirs[i], "DIR"), p
			}
			if outs[1] == "" {
				continue
			}
			if outs[0] != outs[1] || !bytes.Equal(pcaps[0], pcaps[1]) {
				t.Fatalf("seed %d, loss %s: two runs differ (output equal %v, pcap equal %v)", seed, loss, outs[0] == outs[1], bytes.Equal(pcaps[0], pcaps[1]))
			}
			switch {
			case strings.Contains(outs[0], "RETRY_EXC_ERR, because the wire lost B's NAK"):
				nakLost++
			case strings.Contains(outs[0], "stale rkey") && strings.Contains(outs[0], ": REM_ACCESS_ERR\n"):
				nakArrived++
			}
			if !strings.Contains(outs[0], "connections lost to RETRY_EXC_ERR 0\n") {
				reconnected++
			}
		}
		t.Logf("loss %s: %d of %d seeds failed; stale rkey: REM_ACCESS_ERR %d, RETRY_EXC_ERR %d; seeds with a lost connection %d",
			loss, failed, n, nakArrived, nakLost, reconnected)
		if loss == "0.5" && n >= 100 && (nakLost == 0 || nakArrived == 0 || reconnected == 0) {
			t.Errorf("loss 0.5 over %d seeds did not show both outcomes of the stale rkey and a lost connection", n)
		}
	}
}

// TestDemoCaptureWriteError: a capture that cannot be written fails the demo with the reason,
// and a write that fails mid-run is remembered rather than lost.
func TestDemoCaptureWriteError(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	code, _, errOut := demoFixed("softirdma", "-pcap", "/dev/full")
	if code != 1 || !strings.Contains(errOut, "no space left on device") {
		t.Errorf("exit %d, stderr %q; want 1 and the write error", code, errOut)
	}
	w := &errWriter{w: &failAfter{n: 100}}
	if _, err := w.Write(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 64)); err == nil || w.err == nil {
		t.Errorf("second write: %v, kept %v; want the error kept", err, w.err)
	}
	if _, err := w.Write(make([]byte, 1)); err != w.err {
		t.Errorf("after an error: %v, want %v", err, w.err)
	}
}

// failAfter accepts n bytes, then fails every write.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, errors.New("device full")
	}
	f.n -= len(p)
	return len(p), nil
}

// TestDemoNAKsAsDecoded: the NAKs the demo reports are the NAKs on the wire, the number decode
// -flows finds in the demo's own capture. Counting the engine's NAK events counted each NAK
// twice, once where it was sent and once where it arrived, and a lost one once.
func TestDemoNAKsAsDecoded(t *testing.T) {
	demoNAKs := regexp.MustCompile(`NAKs (\d+) \(`)
	nakLine := regexp.MustCompile(`(?m)^ +naks sent:(.*)$`)
	nakKind := regexp.MustCompile(`\b[A-Z_]+=(\d+)`)
	pcap := t.TempDir() + "/demo.pcap"
	total := 0
	for _, loss := range []string{"0", "0.2", "0.4"} {
		for seed := 1; seed <= 10; seed++ {
			code, out, errOut := demoFixed("softirdma", "-seed", fmt.Sprint(seed), "-loss", loss, "-pcap", pcap)
			m := demoNAKs.FindStringSubmatch(out)
			if code != 0 || m == nil {
				t.Fatalf("seed %d, loss %s: exit %d, no NAK count\n%s%s", seed, loss, code, out, errOut)
			}
			code, dec, errOut := runDecodeArgs(t, "-flows", pcap)
			if code != 0 {
				t.Fatalf("seed %d, loss %s: decode -flows exit %d\n%s%s", seed, loss, code, dec, errOut)
			}
			decoded := 0
			for _, l := range nakLine.FindAllStringSubmatch(dec, -1) {
				for _, k := range nakKind.FindAllStringSubmatch(l[1], -1) {
					n, _ := strconv.Atoi(k[1])
					decoded += n
				}
			}
			if got, _ := strconv.Atoi(m[1]); got != decoded {
				t.Errorf("seed %d, loss %s: the demo reports %d NAKs, decode -flows finds %d in its capture", seed, loss, got, decoded)
			}
			total += decoded
		}
	}
	if total == 0 {
		t.Fatal("no run sent a NAK: the test compares nothing")
	}
}
