package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/softirdma/softirdma/wire/roce"

	"github.com/softirdma/softirdma/wire/afpacket"
)

func init() {
	register("links", "the machine's adapters: state, MAC, MTU, addresses, the RoCEv2 GIDs softirdma would use, kernel RDMA devices", runLinks)
	register("doctor", "check whether softirdma can stand on an adapter, and say what to do about each problem", runDoctor)
}

func runLinks(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("links", stderr)
	watch := fs.String("watch", "", "print the named adapter's state changes as netlink reports them")
	watchFor := fs.Duration("for", 0, "with -watch: stop after this long (0: until interrupted)")
	setUsage(fs, stderr,
		"usage: softirdma links [-watch ADAPTER [-for DURATION]]",
		"Lists the machine's adapters: state, MAC, MTU and RoCE path MTU, addresses, the RoCEv2 GIDs",
		"softirdma would use on each (in rxe's order, for -g and -x), and kernel RDMA devices on them.",
	)
	if code, done := parseNoArgs(fs, args); done {
		return code
	}
	if code := checkFlags(stderr, "links", atLeast("for", *watchFor, 0)); code != 0 {
		return code
	}
	forSet := false
	fs.Visit(func(f *flag.Flag) { forSet = forSet || f.Name == "for" })
	if forSet && *watch == "" {
		fmt.Fprintln(stderr, "softirdma links: -for bounds -watch ADAPTER and means nothing without it: add -watch, or drop -for")
		return 2
	}
	if *watch != "" {
		return watchLink(*watch, *watchFor, stdout, stderr)
	}
	ads, err := afpacket.Adapters()
	if err != nil {
		fmt.Fprintf(stderr, "softirdma links: %v\n", err)
		return 1
	}
	rdma := kernelRDMA()
	for _, a := range ads {
		state := "down"
		if a.Up {
			state = "up"
		}
		fmt.Fprintf(stdout, "%s (index %d): %s, mac %s, mtu %d, RoCE path MTU %d\n", a.Name, a.Index, state, net.HardwareAddr(a.MAC[:]), a.MTU, pathMTU(a.MTU))
		for _, ip := range a.Addrs {
			fmt.Fprintf(stdout, "  address %s\n", ip)
		}
		for i, g := range a.GIDs() {
			fmt.Fprintf(stdout, "  gid[%d] %s\n", i, g)
		}
		for _, d := range rdma[a.Name] {
			fmt.Fprintf(stdout, "  kernel RDMA device %s is on this adapter\n", d)
		}
	}
	return 0
}

// pathMTU is the largest IB MTU that fits a netdev MTU with RoCEv2's headers (rxe's rule:
// netdev MTU minus 80 bytes of headers and ICRC).
func pathMTU(netdevMTU int) int {
	best := 0
	for _, m := range []int{256, 512, 1024, 2048, 4096} {
		if m <= netdevMTU-80 {
			best = m
		}
	}
	return best
}

// kernelRDMA maps adapters to the kernel RDMA devices (rxe, hardware) on them, from sysfs.
func kernelRDMA() map[string][]string {
	out := map[string][]string{}
	devs, _ := filepath.Glob("/sys/class/infiniband/*")
	for _, d := range devs {
		nets, _ := filepath.Glob(filepath.Join(d, "device/net/*"))
		for _, n := range nets {
			out[filepath.Base(n)] = append(out[filepath.Base(n)], filepath.Base(d))
		}
		if parent, err := os.ReadFile(filepath.Join(d, "parent")); err == nil { // rxe names its netdev here
			name := strings.TrimSpace(string(parent))
			out[name] = append(out[name], filepath.Base(d))
		}
	}
	return out
}

func runDoctor(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("doctor", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma doctor [ADAPTER]")
		fmt.Fprintln(stderr, "Checks every adapter that is up (or the one named) for what softirdma needs to stand on it.")
	}
	name, code, done := parseWithOneArg(fs, args)
	if done {
		return code
	}
	ads, err := afpacket.Adapters()
	if err != nil {
		fmt.Fprintf(stderr, "softirdma doctor: %v\n", err)
		return 1
	}
	sort.Slice(ads, func(i, j int) bool { return ads[i].Index < ads[j].Index })
	rdma := kernelRDMA()
	problems := 0
	checked := 0
	for _, a := range ads {
		if name != "" && a.Name != name || name == "" && (!a.Up || a.Name == "lo") {
			continue
		}
		checked++
		problems += doctorAdapter(stdout, a, rdma[a.Name])
	}
	if checked == 0 && name != "" {
		fmt.Fprintf(stderr, "softirdma doctor: no adapter named %q ('softirdma links' lists the machine's adapters)\n", name)
		return 1
	}
	if checked == 0 {
		fmt.Fprintln(stdout, "no adapter to check: none is up besides lo (name one to check it anyway)")
		return 1
	}
	if problems > 0 {
		fmt.Fprintf(stdout, "%d problem(s) to fix\n", problems)
		return 1
	}
	fmt.Fprintln(stdout, "all good")
	return 0
}

// doctorAdapter checks one adapter, prints a line per check, and returns how many failed.
func doctorAdapter(stdout io.Writer, a afpacket.Adapter, rdma []string) (problems int) {
	say := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if !ok {
			mark = "FIX "
			problems++
		}
		fmt.Fprintf(stdout, "  %s %s\n", mark, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(stdout, "%s:\n", a.Name)
	say(a.Up, "link is %s", map[bool]string{true: "up", false: "down: ip link set " + a.Name + " up"}[a.Up])
	m := pathMTU(a.MTU)
	say(m > 0, "path MTU %d: the largest of 256..4096 that fits MTU %d less 80 bytes of RoCEv2 headers", m, a.MTU)
	ip, has4 := a.IPv4()
	if has4 {
		say(true, "IPv4 address %s (softirdma's GID ::ffff:%s)", ip, ip)
	} else {
		say(false, "no IPv4 address, which softirdma needs for its GID: %s", addIPv4(a.Name))
	}
	if len(rdma) > 0 {
		say(false, "kernel RDMA device %s owns UDP %d here: remove it (rdma link delete %s) or use another adapter",
			strings.Join(rdma, ","), roce.UDPPort, rdma[0])
	}
	if has4 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip.AsSlice(), Port: roce.UDPPort})
		if err == nil {
			c.Close()
		}
		say(err == nil, "UDP %d on %s is free (softirdma holds it so the kernel does not answer RoCE with port unreachable)%s", roce.UDPPort, ip, errText(err))
	}
	l, err := afpacket.Open(a, netip.Addr{})
	if err == nil {
		l.Close()
	}
	say(err == nil, "packet socket on %s%s", a.Name, errText(err))
	return problems
}

// addIPv4 says how to give an adapter an IPv4 address.
func addIPv4(ifname string) string {
	return fmt.Sprintf("add one with 'ip addr add 192.0.2.1/24 dev %s' (an address of the adapter's network)", ifname)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

func watchLink(name string, d time.Duration, stdout, stderr io.Writer) int {
	if _, err := afpacket.Lookup(name); err != nil {
		fmt.Fprintf(stderr, "softirdma links: %v\n", err)
		return 1
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	last := ""
	show := func(a afpacket.Adapter) {
		state := "down"
		if a.Up {
			state = "up"
		}
		line := fmt.Sprintf("%s: %s, mtu %d", a.Name, state, a.MTU)
		mu.Lock()
		defer mu.Unlock()
		if line != last {
			fmt.Fprintln(stdout, line)
			last = line
		}
	}
	if err := afpacket.Watch(name, stop, show); err != nil {
		fmt.Fprintf(stderr, "softirdma links: %v\n", err)
		return 1
	}
	// The state it starts from, read after subscribing so no change falls between the two:
	// a script can wait for this line instead of sleeping before it changes the link.
	if a, err := afpacket.Lookup(name); err == nil {
		show(a)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if d > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, d)
		defer c()
	}
	<-ctx.Done()
	close(stop)
	return 0
}
