// Package interop_test checks the harness that runs the interop tiers (the tiers themselves need
// root, QEMU and the Debian mirror, and run from make interop).
package interop_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// make interop runs every tier even when one fails: a failing tier does not keep the ones after
// it from running, the tally names it, and the exit status says it failed.
func TestInteropRunsEveryTier(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	// A make that records the tier it is asked for and fails the ones named fail-*.
	stub := filepath.Join(dir, "make")
	script := "#!/bin/sh\nfor a; do t=$a; done\necho \"$t\" >> " + ran + "\necho \"PASS $t-case\"\ncase $t in fail-*) exit 2;; esac\n"
	if err := os.WriteFile(stub, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tiers, ran, tally string
		ok                bool
	}{
		{"one fail-two three fail-four", "one fail-two three fail-four", "interop tiers: 2 passed, 2 failed (fail-two fail-four)", false},
		{"one two", "one two", "interop tiers: 2 passed, 0 failed", true},
	} {
		os.Remove(ran)
		cmd := exec.Command("make", "-s", "-C", "..", "interop", "INTEROP_TIERS="+c.tiers, "MAKE="+stub)
		out, err := cmd.Output() // make's own "Error 1" line goes to standard error
		if (err == nil) != c.ok {
			t.Errorf("%s: exit %v, want success %v\n%s", c.tiers, err, c.ok, out)
		}
		got, _ := os.ReadFile(ran)
		if strings.Join(strings.Fields(string(got)), " ") != c.ran {
			t.Errorf("%s: ran %q, want %q\n%s", c.tiers, got, c.ran, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if last := lines[len(lines)-1]; last != c.tally {
			t.Errorf("%s: last line %q, want %q", c.tiers, last, c.tally)
		}
		for _, tier := range strings.Fields(c.tiers) {
			if !strings.Contains(string(out), "PASS "+tier+"-case\n") {
				t.Errorf("%s: tier %s's lines are not in the output:\n%s", c.tiers, tier, out)
			}
		}
	}
}
