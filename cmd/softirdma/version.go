package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at link time by release builds (-ldflags "-X main.version=v1.2.3").
var version = ""

func init() {
	register("version", "print the version of softirdma and of the Go toolchain that built it", runVersion)
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma version")
		fmt.Fprintln(stderr, "Prints softirdma's version, the Go toolchain that built it, the OS and architecture, and the")
		fmt.Fprintln(stderr, "commit it was built from as Go recorded it (or that none was recorded).")
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softirdma version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fmt.Fprintf(stdout, "softirdma %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, buildCommit(info))
	return 0
}

// buildCommit is the line a bug report needs to say what was built: the commit, its time and
// whether the tree had changes, as go build records them from git. go test, go run of a file
// list and builds with -buildvcs=false record none, so the line says so rather than print nothing.
func buildCommit(info *debug.BuildInfo) string {
	var rev, at, modified string
	if info != nil {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	if rev == "" {
		return "commit: not recorded (built without version control information)"
	}
	line := "commit: " + rev
	if at != "" {
		line += " (" + at + ")"
	}
	switch modified {
	case "true":
		line += ", with uncommitted changes"
	case "false":
		line += ", clean tree"
	}
	return line
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}
