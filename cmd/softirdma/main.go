// Command softirdma runs the software RDMA NIC: a guided demo on the embedded default, and the
// tools that come with the card. Each subcommand lives in a file of its own and registers itself
// in commands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand. run gets the arguments after the subcommand's name and returns the
// process exit status.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string, stdout, stderr io.Writer) int) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "-version", "--version":
		args = []string{"version"}
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "softirdma: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "softirdma — a software RDMA NIC (RoCEv2, memory regions and windows, RC transport)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: softirdma <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'softirdma <command> -h' for the flags of one command.")
}

// flagSet is what the subcommands need of a *flag.FlagSet.
type flagSet = *flag.FlagSet

// newFlagSet gives every subcommand the same flag behaviour: Go's flag syntax (-seed 7 and
// --seed 7 alike), errors and help on stderr, and no os.Exit from inside the parser.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("softirdma "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and says which exit status to use when parsing ends the command:
// 0 for -h, 2 for a bad flag.
func parseFlags(fs *flag.FlagSet, args []string) (exit int, done bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	default:
		return 2, true
	}
}
