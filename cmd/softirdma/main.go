// Command softirdma runs the software RDMA NIC: a guided demo on the embedded default, and the
// tools that come with the card. Each subcommand lives in a file of its own and registers itself
// in commands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/softirdma/softirdma/internal/sockguard"
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
	sockguard.RunIfGuard() // serve's socket guard is this executable started again
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help":
		return help(args[1:], stdout, stderr)
	case "-h", "-help", "--help":
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

// help is `softirdma help [COMMAND]`: the banner, or COMMAND -h on stdout.
func help(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stdout)
		return 0
	case len(args) > 1:
		fmt.Fprintf(stderr, "softirdma help: one command at a time, got %q and %q\n", args[0], args[1])
		return 2
	case args[0] == "help":
		fmt.Fprintln(stdout, "usage: softirdma help [COMMAND]")
		fmt.Fprintln(stdout, "Without COMMAND, lists the commands; with one, shows its usage and flags on standard output")
		fmt.Fprintln(stdout, "(as 'softirdma COMMAND -h' does on standard error).")
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "softirdma help: no command %q; the commands are %s\n", args[0], strings.Join(commandNames(), ", "))
		return 2
	}
	cmd.run([]string{"-h"}, stdout, stdout)
	return 0
}

// commandNames are the commands' names, sorted.
func commandNames() []string {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "softirdma — a software RDMA NIC (RoCEv2; memory regions and windows; the RC, UC and UD transports and the GSI QP)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: softirdma <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, name := range commandNames() {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'softirdma help <command>' or 'softirdma <command> -h' for the flags of one command.")
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
// 0 for -h (which prints the command's usage), 2 for a bad flag (the parser's one line and where
// to find the flags, not the whole usage).
func parseFlags(fs *flag.FlagSet, args []string) (exit int, done bool) {
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		zeroNegativeZeros(fs)
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
		return 0, true
	default:
		fmt.Fprintf(fs.Output(), "Run '%s -h' for its flags.\n", fs.Name())
		return 2, true
	}
}

// zeroNegativeZeros makes -0 given to a float flag 0: it is the same number, and a command that
// prints the value back (the demo's "loss -0") would show a sign that means nothing.
func zeroNegativeZeros(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if v, ok := g.Get().(float64); ok && v == 0 && math.Signbit(v) {
				_ = f.Value.Set("0")
			}
		}
	})
}

// flagCheck is a numeric flag's value against what the flag accepts. Commands check every number
// before they do anything with checkFlags, built from intRange, floatRange, oneOf and atLeast.
type flagCheck struct {
	name, value, accepted string
	ok                    bool
}

// intRange accepts lo..hi.
func intRange(name string, v, lo, hi int) flagCheck {
	return flagCheck{name, strconv.Itoa(v), fmt.Sprintf("%d..%d", lo, hi), lo <= v && v <= hi}
}

// floatRange accepts lo..hi, not NaN.
func floatRange(name string, v, lo, hi float64) flagCheck {
	return flagCheck{name, strconv.FormatFloat(v, 'g', -1, 64), fmt.Sprintf("%g..%g", lo, hi), lo <= v && v <= hi}
}

// oneOf accepts the values listed.
func oneOf(name string, v int, allowed ...int) flagCheck {
	var s []string
	for _, a := range allowed {
		s = append(s, strconv.Itoa(a))
	}
	return flagCheck{name, strconv.Itoa(v), strings.Join(s, ", "), slices.Contains(allowed, v)}
}

// atLeast accepts durations from lo on.
func atLeast(name string, v, lo time.Duration) flagCheck {
	return flagCheck{name, v.String(), lo.String() + " or more", v >= lo}
}

// durationRange accepts lo..hi.
func durationRange(name string, v, lo, hi time.Duration) flagCheck {
	return flagCheck{name, v.String(), lo.String() + ".." + hi.String(), lo <= v && v <= hi}
}

// checkFlags prints the first check that fails as one line, "softirdma CMD: -FLAG VALUE is out of
// range (ACCEPTED)", and returns 2; it returns 0 when every check passes.
func checkFlags(stderr io.Writer, cmd string, checks ...flagCheck) int {
	for _, c := range checks {
		if !c.ok {
			fmt.Fprintf(stderr, "softirdma %s: -%s %s is out of range (%s)\n", cmd, c.name, c.value, c.accepted)
			return 2
		}
	}
	return 0
}
