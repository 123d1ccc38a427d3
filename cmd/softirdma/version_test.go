package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// version names the commit Go recorded in the binary, its time and whether the tree had changes,
// and says so when nothing was recorded, so a bug report always says what was built.
func TestVersionCommit(t *testing.T) {
	info := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "9d0c05e0123456789abcdef0123456789abcdef0"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	if got, want := buildCommit(info), "commit: 9d0c05e0123456789abcdef0123456789abcdef0 (2026-12-01T10:00:00Z), with uncommitted changes"; got != want {
		t.Fatalf("buildCommit = %q, want %q", got, want)
	}
	info.Settings[3].Value = "false"
	if got := buildCommit(info); !strings.HasSuffix(got, ", clean tree") {
		t.Fatalf("clean tree: %q", got)
	}
	for _, info := range []*debug.BuildInfo{nil, {}} {
		if got := buildCommit(info); !strings.Contains(got, "not recorded") {
			t.Fatalf("no commit recorded: %q", got)
		}
	}
	// A test binary carries no commit; the command says so on a line of its own.
	code, out, _ := runCLI("version")
	if code != 0 || !strings.Contains(out, "\ncommit: not recorded") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
}

// A binary that go build made in this repository names the commit checked out.
func TestVersionCommitOfBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "softirdma")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.Contains(string(out), "commit: "+strings.TrimSpace(string(head))+" (") {
		t.Fatalf("version of a built binary: %v\n%s", err, out)
	}
}
