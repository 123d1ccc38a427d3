package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/softirdma/softirdma/fabric"
	"github.com/softirdma/softirdma/fabric/control"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/wire/ethswitch"
)

// maxFunctions bounds -function: each is a socket, a goroutine set and an engine.
const maxFunctions = 64

// functionFlags collects the -function flags, each checked as it is given: the functions of
// serve's fabric.
type functionFlags []fabric.FunctionSpec

const functionExample = "e.g. -function name=a,socket=/tmp/a.sock,ip=192.168.77.1"

var functionName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func (f *functionFlags) String() string {
	var names []string
	for _, s := range *f {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

// Set parses name=NAME,socket=PATH[,ip=ADDR][,mac=MAC][,rate=RATE]. Without ip the function gets
// 192.0.2.N (N its position); without mac, 02:00 and the four bytes of its address.
func (f *functionFlags) Set(v string) error {
	if len(*f) == maxFunctions {
		return fmt.Errorf("at most %d functions", maxFunctions)
	}
	given, err := functionKeys(v)
	if err != nil {
		return err
	}
	s, err := functionSpec(given, len(*f)+1)
	if err != nil {
		return err
	}
	for _, o := range *f {
		switch {
		case o.Name == s.Name:
			return fmt.Errorf("two functions named %s", s.Name)
		case o.Socket == s.Socket:
			return fmt.Errorf("functions %s and %s on one socket %s", o.Name, s.Name, s.Socket)
		case o.IP == s.IP:
			return fmt.Errorf("functions %s and %s with one address %s", o.Name, s.Name, s.IP)
		case o.MAC == s.MAC:
			return fmt.Errorf("functions %s and %s with one MAC %s", o.Name, s.Name, net.HardwareAddr(s.MAC[:]))
		}
	}
	*f = append(*f, s)
	return nil
}

// functionKeys are the KEY=VALUE pairs of a -function, each key given once and known.
func functionKeys(v string) (map[string]string, error) {
	return flagKeys(v, "function", functionExample, "name", "socket", "ip", "mac", "rate")
}

// flagKeys are the KEY=VALUE pairs of a flag that describes a thing (-function, -host), each
// key one of keys and given once; what names the thing in an error once its name= is known.
func flagKeys(v, what, example string, keys ...string) (map[string]string, error) {
	given := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || val == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE (%s)", kv, example)
		}
		if first, twice := given[k]; twice {
			// The last one winning would hide a typo (name=a,name=b: which is it?).
			err := fmt.Errorf("%s= given twice (%s=%s and %s=%s)", k, k, first, k, val)
			if name := given["name"]; name != "" {
				err = fmt.Errorf("%s %s: %w", what, name, err)
			}
			return nil, err
		}
		if !slices.Contains(keys, k) {
			last := len(keys) - 1
			return nil, fmt.Errorf("unknown key %q: the keys are %s and %s (%s)", k, strings.Join(keys[:last], ", "), keys[last], example)
		}
		given[k] = val
	}
	return given, nil
}

// splitPrefix splits ADDR[/BITS] (BITS 24 when left out), and says whether BITS is a subnet's
// prefix length a device may have (8 to 30).
func splitPrefix(text string) (addr string, bits int, ok bool) {
	a, b, cut := strings.Cut(text, "/")
	if !cut {
		return text, 24, true
	}
	n, err := strconv.Atoi(b)
	return a, n, err == nil && n >= 8 && n <= 30
}

// functionSpec checks the keys of the nth -function and makes its function of them.
func functionSpec(given map[string]string, nth int) (fabric.FunctionSpec, error) {
	s := fabric.FunctionSpec{Name: given["name"], Socket: given["socket"]}
	if !functionName.MatchString(s.Name) {
		return s, fmt.Errorf("name=%q: a name is 1 to 32 letters, digits, - or _ (%s)", s.Name, functionExample)
	}
	if s.Socket == "" {
		return s, fmt.Errorf("function %s has no socket=PATH (%s)", s.Name, functionExample)
	}
	if err := checkSocketPath(s.Socket); err != nil {
		return s, fmt.Errorf("function %s: %v", s.Name, strings.Replace(err.Error(), "-socket ", "socket=", 1))
	}
	ipText := given["ip"]
	if ipText == "" {
		ipText = fmt.Sprintf("192.0.2.%d", nth)
	}
	var err error
	if s.IP, err = ownIPv4("ip=", ipText, "the function's own unicast IPv4 address"); err != nil {
		return s, fmt.Errorf("function %s: %v", s.Name, err)
	}
	if rate := given["rate"]; rate != "" {
		if s.Rate, err = parseRate(rate); err != nil {
			return s, fmt.Errorf("function %s: rate=: %v", s.Name, err)
		}
	}
	lf := linkFlags{ip: ipText, mac: given["mac"]}
	if s.MAC, err = lf.macAddr(); err != nil {
		return s, fmt.Errorf("function %s: %v", s.Name, strings.Replace(err.Error(), "-mac ", "mac=", 1))
	}
	return s, nil
}

// fabricOptions are serve's flags for several functions on one fabric, checked.
type fabricOptions struct {
	functions functionFlags
	uplink    string // a dgram or stream link, or ""
	// uplinkRate is the uplink's rate in bits per second (ethswitch.Port.SetRate), 0 for none.
	uplinkRate float64
	pcap       string
	loss       float64
	window     int        // each device's send window
	faults     faultFlags // in the fabric from the start
	control    string     // the control socket's path, or ""
	debug      bool
	hosts      hostFlags // devices for programs on this machine
	hostDir    string    // where programs find them
	procs      procsFlag
}

// fabricOptions checks the flags that go with -function.
func (f *serveFlags) fabricOptions(stderr io.Writer) (fabricOptions, int) {
	o := fabricOptions{functions: f.functions, faults: f.faults, control: f.control, debug: f.debug, hosts: f.hosts, procs: f.procs}
	lc := f.link
	if err := checkHosts(f.hosts, f.functions); err != nil {
		return o, refuse(stderr, "%v", err)
	}
	switch {
	case len(f.hosts) > 0:
		dir, err := hostDir(f.hostDir)
		if err != nil {
			return o, refuse(stderr, "%v", err)
		}
		o.hostDir = dir
	case f.hostDir != "":
		return o, refuse(stderr, "-host-dir is where -host's devices are served: give the devices with -host name=rxe0")
	}
	if f.rate != "" {
		var err error
		if o.uplinkRate, err = parseRate(f.rate); err != nil {
			return o, refuse(stderr, "-rate: %v", err)
		}
		if lc.link == "" {
			return o, refuse(stderr, "-rate is the uplink's: give the uplink with -link dgram:... or stream:...")
		}
	}
	switch {
	case f.socket != "":
		return o, refuse(stderr, "-socket and -function exclude each other: give the socket as -function name=NAME,socket=%s", f.socket)
	case lc.ip != "" || lc.mac != "":
		return o, refuse(stderr, "-ip and -mac are each function's with -function: -function name=NAME,socket=PATH,ip=ADDR,mac=MAC")
	case lc.link != "" && !strings.HasPrefix(lc.link, "dgram:") && !strings.HasPrefix(lc.link, "stream:"):
		return o, refuse(stderr, "-link %q: the fabric's uplink is a dgram or stream link", lc.link)
	}
	if lc.link != "" {
		lc.ip = "192.0.2.1" // the uplink has no address of its own; check wants one
		if err := lc.check(); err != nil {
			return o, refuse(stderr, "%v", err)
		}
	}
	o.uplink, o.pcap, o.loss, o.window = lc.link, lc.pcap, lc.loss, lc.window
	for _, ft := range o.faults {
		if err := fabric.CheckFault(ft, o.senders()); err != nil {
			return o, refuse(stderr, "-fault %s: %v", ft.Spec(), err)
		}
	}
	if o.control != "" {
		if err := checkSocketPath(o.control); err != nil {
			return o, refuse(stderr, "%s", strings.Replace(err.Error(), "-socket", "-control", 1))
		}
	}
	return o, 0
}

// doorbellRuns says whether the functions may run their doorbells' work on the goroutines that
// read them (fabric.FunctionConfig.DoorbellRuns): not when a sender may wait for a paced port
// or for the uplink's peer.
func (o *fabricOptions) doorbellRuns() bool {
	if o.uplinkRate > 0 || sendsWaitForPeer(o.uplink) {
		return false
	}
	for _, s := range o.functions {
		if s.Rate > 0 {
			return false
		}
	}
	return true
}

// senders are the names a fault's from= may take: the functions', and the uplink's.
func (o *fabricOptions) senders() []string {
	var names []string
	for _, f := range o.functions {
		names = append(names, f.Name)
	}
	for _, h := range o.hosts {
		names = append(names, h.Name)
	}
	if o.uplink != "" {
		names = append(names, "uplink")
	}
	return names
}

// serveFabric serves each function on its own socket, all of them on one fabric (package
// fabric) that hands their frames to each other in memory, with the uplink, if any, as one more
// port, until ctx ends.
func serveFabric(ctx context.Context, o fabricOptions, stdout, stderr io.Writer) int {
	log := serveLog(o.debug, stderr)
	guard := startSocketGuard()
	defer guard.close()
	fab, err := buildFabric(o, log, guard.conns())
	if err != nil {
		return failed(log, err)
	}
	defer fab.Close()
	if o.control != "" {
		ctl, err := serveControl(o, fab, log, stdout)
		if err != nil {
			return failed(log, err)
		}
		defer ctl.Close()
	}
	guard.report(log)
	defer governProcs(ctx, log, o.procs)()
	var fns []*fabric.Function
	runs := o.doorbellRuns()
	for _, s := range o.functions {
		s.DoorbellRuns = runs
		fn, err := fab.AddFunction(s)
		if err != nil {
			return failed(log, err)
		}
		fns = append(fns, fn)
		announce(log.With("function", s.Name), stdout, fmt.Sprintf("function %s (%s) ", s.Name, s.IP), s.Socket, s.IP, s.MAC)
	}
	if len(fns) > 0 {
		fmt.Fprintln(stdout, "  # then add each guest's own options to its line: its disk, or -kernel/-initrd/-append, its console")
	}
	if len(o.hosts) > 0 {
		hp, err := serveHostDevices(ctx, fab, o.hosts, o.hostDir, log, stdout)
		if err != nil {
			return failed(log, err)
		}
		defer hp.close()
		if len(fns) == 0 {
			<-ctx.Done()
			log.Info("stopped")
			return 0
		}
	}
	return serveFunctions(ctx, log, fns...)
}

// buildFabric makes serve's fabric: its capture, its uplink, and the faults given at the start.
// The plan sees every frame from the start when faults may come (-fault, -control), so that
// their frame numbers are the capture's.
func buildFabric(o fabricOptions, log *slog.Logger, guard vfiouser.ConnGuard) (*fabric.Fabric, error) {
	fab, err := fabric.New(fabric.Config{Log: log, Pcap: o.pcap, Faults: len(o.faults) > 0 || o.control != "", Loss: o.loss, Guard: guard,
		SendWindow: o.window})
	if err != nil {
		return nil, err
	}
	if o.uplink != "" {
		if err := addUplink(fab, o, log); err != nil {
			fab.Close()
			return nil, err
		}
	}
	for _, ft := range o.faults {
		fab.AddFault(ft)
	}
	return fab, nil
}

// addUplink joins the fabric to -link.
func addUplink(fab *fabric.Fabric, o fabricOptions, log *slog.Logger) error {
	link, err := openSocketLink(o.uplink)
	if err != nil {
		return &fabric.Error{Msg: "cannot open the uplink", Attrs: []any{"link", o.uplink}, Err: err}
	}
	if err := fab.AddUplink("uplink", link, o.uplinkRate); err != nil {
		return err
	}
	log.Info("uplink", "link", o.uplink, "rate", o.uplinkRate)
	return nil
}

// serveControl makes -control's socket on the fabric and serves it.
func serveControl(o fabricOptions, fab *fabric.Fabric, log *slog.Logger, stdout io.Writer) (*control.Server, error) {
	ctl, err := control.Listen(o.control, fab, o.senders(), log)
	if errors.Is(err, control.ErrInUse) {
		err = fmt.Errorf("-control %w", err)
	}
	if err != nil {
		return nil, &fabric.Error{Msg: "cannot make the control socket", Attrs: []any{"control", o.control}, Err: err}
	}
	go ctl.Serve()
	log.Info("control socket", "control", o.control)
	fmt.Fprintf(stdout, "softirdma serve: control socket %s (softirdma fault -socket %s add|list|remove|ports)\n", o.control, o.control)
	return ctl, nil
}

// parseRate reads a rate in bits per second: a number with an optional SI suffix (k, M, G:
// thousands, millions, billions), from 1k to ethswitch.MaxRate.
func parseRate(v string) (float64, error) {
	num, mult := v, 1.0
	switch {
	case strings.HasSuffix(v, "k"):
		num, mult = v[:len(v)-1], 1e3
	case strings.HasSuffix(v, "M"):
		num, mult = v[:len(v)-1], 1e6
	case strings.HasSuffix(v, "G"):
		num, mult = v[:len(v)-1], 1e9
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a rate: bits per second, a number with k, M or G after it (e.g. 8M, 1.5G)", v)
	}
	if r := f * mult; r < 1e3 || r > ethswitch.MaxRate {
		return 0, fmt.Errorf("%s is out of range: 1k to 400G bits per second", v)
	}
	return f * mult, nil
}
