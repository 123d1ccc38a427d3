package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/fabric/control"
	"github.com/softirdma/softirdma/wire/faultplan"
)

func init() {
	register("fault", "break serve's fabric on demand: add, list and remove faults through its control socket", runFault)
}

// faultFlags collects serve's -fault flags, each parsed as it is given.
type faultFlags []faultplan.Fault

func (f *faultFlags) String() string { return fmt.Sprint(len(*f), " faults") }

func (f *faultFlags) Set(v string) error {
	ft, err := faultplan.Parse(v)
	if err != nil {
		return err
	}
	*f = append(*f, ft)
	return nil
}

// faultUsage is fault's -h before its flags; FAULT_SYNTAX stands for faultplan.Syntax.
const faultUsage = "usage: softirdma fault -socket CTL add FAULT | list | remove N | ports\n" +
	"\n" +
	"Breaks the fabric of a `softirdma serve -function ... -control CTL` while it runs: add a fault\n" +
	"(its number printed), list the faults with how often each matched and fired and the numbers of\n" +
	"the frames it fired on in serve's -pcap capture, remove one;\n" +
	"ports shows what each port of the fabric carried, as the switch saw it: frames and bytes in\n" +
	"from the function (or the uplink's link) and out to it, frames dropped for it (its queue full:\n" +
	"a guest that does not keep up), frames queued. The flags may come before or after the command.\n" +
	"A fault:\n" +
	"  FAULT_SYNTAX\n" +
	"e.g. softirdma fault -socket /tmp/ctl.sock add drop from=a opcode=RDMA_READ_RESPONSE_MIDDLE nth=3\n" +
	"\n"

// runFault is `softirdma fault -socket CTL add FAULT...|list|remove N|ports`, its flags before,
// after or among the words of its command.
func runFault(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("fault", stderr)
	socket := fs.String("socket", "", "serve's control socket (serve -control `PATH`)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on serve's answer after this long (1ms..10m)")
	fs.Usage = func() {
		fmt.Fprint(stderr, withFaultSyntax(faultUsage))
		fs.PrintDefaults()
	}
	words, code, done := parseWithArgs(fs, args)
	if done {
		return code
	}
	if code := checkFlags(stderr, "fault", durationRange("timeout", *timeout, time.Millisecond, 10*time.Minute)); code != 0 {
		return code
	}
	if *socket == "" {
		fmt.Fprintln(stderr, "softirdma fault: -socket CTL is required: serve's -control socket")
		return 2
	}
	ask, err := faultCommand(words)
	if err == nil {
		err = checkControlPath(*socket)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softirdma fault: %v\n", err)
		return 2
	}
	if err := ask(control.Client{Path: *socket, Timeout: *timeout}, stdout); err != nil {
		fmt.Fprintf(stderr, "softirdma fault: %v\n", controlError(*socket, err))
		return 1
	}
	return 0
}

// faultCommand checks the command's words and gives what asks serve for it and prints what
// serve did.
func faultCommand(words []string) (func(c control.Client, stdout io.Writer) error, error) {
	switch {
	case len(words) >= 2 && words[0] == "add":
		f, err := faultplan.Parse(strings.Join(words[1:], " "))
		if err != nil {
			return nil, err
		}
		return func(c control.Client, stdout io.Writer) error {
			id, err := c.Add(f)
			if err == nil {
				fmt.Fprintf(stdout, "fault %d added\n", id)
			}
			return err
		}, nil
	case len(words) == 1 && words[0] == "list":
		return control.Client.List, nil
	case len(words) == 1 && words[0] == "ports":
		return control.Client.Ports, nil
	case len(words) == 2 && words[0] == "remove":
		n, err := strconv.Atoi(words[1])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("remove takes a fault's number, not %q", words[1])
		}
		return func(c control.Client, stdout io.Writer) error {
			err := c.Remove(n)
			if err == nil {
				fmt.Fprintf(stdout, "fault %s removed\n", words[1])
			}
			return err
		}, nil
	}
	return nil, errors.New("give add FAULT, list, remove N or ports")
}

// controlError words what went wrong in asking serve's control socket at path for fault's user,
// naming the flag to change: a connection that failed says whether anyone listens, an answer
// cut short that serve's was.
func controlError(path string, err error) error {
	var conn *control.ConnError
	var cut *control.CutError
	switch {
	case errors.As(err, &conn) && errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("-socket %s does not exist: is serve running with -control %s?", path, path)
	case errors.As(err, &conn) && errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("-socket %s is a socket nobody listens on: has serve stopped?", path)
	case errors.As(err, &conn):
		return fmt.Errorf("-socket %s: %v", path, conn.Err)
	case errors.As(err, &cut) && cut.Timeout > 0:
		return fmt.Errorf("serve's answer did not end within %v", cut.Timeout)
	case errors.As(err, &cut):
		return fmt.Errorf("serve ended the connection before its answer did (%v)", cut.Err)
	}
	return err // serve's refusal, or a socket that is not serve's control socket: as they are
}

// checkControlPath refuses a -socket that is no socket at all, naming what it is; connect alone
// says "connection refused" of a file or a directory.
func checkControlPath(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil // dialing says why, in words of its own (controlError)
	}
	var what string
	switch m := fi.Mode(); {
	case m&os.ModeSocket != 0:
		return nil
	case m.IsDir():
		what = "a directory"
	case m.IsRegular():
		what = "a regular file"
	case m&os.ModeNamedPipe != 0:
		what = "a named pipe"
	case m&os.ModeDevice != 0:
		what = "a device"
	default:
		what = "not a socket"
	}
	return fmt.Errorf("-socket %s is %s, not serve's control socket (serve -control PATH)", path, what)
}
