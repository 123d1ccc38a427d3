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
		fmt.Fprintln(stderr, "Prints softirdma's version, the Go toolchain that built it, and the OS and architecture.")
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softirdma version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fmt.Fprintf(stdout, "softirdma %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
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
