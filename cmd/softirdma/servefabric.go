package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/vfioserve"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/sockguard"
	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
	"github.com/softirdma/softirdma/wire/neigh"
)

// maxFunctions bounds -function: each is a socket, a goroutine set and an engine.
const maxFunctions = 64

// functionSpec is one -function: a PCI function of its own, on its own socket, on the fabric.
type functionSpec struct {
	name, socket string
	ip           netip.Addr
	mac          [6]byte
	rate         float64 // the function's port's rate (rate=), 0 for none
}

// functionFlags collects the -function flags, each checked as it is given.
type functionFlags []functionSpec

const functionExample = "e.g. -function name=a,socket=/tmp/a.sock,ip=192.168.77.1"

var functionName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func (f *functionFlags) String() string {
	var names []string
	for _, s := range *f {
		names = append(names, s.name)
	}
	return strings.Join(names, ",")
}

// Set parses name=NAME,socket=PATH[,ip=ADDR][,mac=MAC][,rate=RATE]. Without ip the function gets
// 192.0.2.N (N its position); without mac, 02:00 and the four bytes of its address.
func (f *functionFlags) Set(v string) error {
	if len(*f) == maxFunctions {
		return fmt.Errorf("at most %d functions", maxFunctions)
	}
	var s functionSpec
	var ipText, macText, rateText string
	given := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || val == "" {
			return fmt.Errorf("%q is not KEY=VALUE (%s)", kv, functionExample)
		}
		if first, twice := given[k]; twice {
			// The last one winning would hide a typo (name=a,name=b: which is it?).
			err := fmt.Errorf("%s= given twice (%s=%s and %s=%s)", k, k, first, k, val)
			if s.name != "" {
				err = fmt.Errorf("function %s: %w", s.name, err)
			}
			return err
		}
		given[k] = val
		switch k {
		case "name":
			s.name = val
		case "socket":
			s.socket = val
		case "ip":
			ipText = val
		case "mac":
			macText = val
		case "rate":
			rateText = val
		default:
			return fmt.Errorf("unknown key %q: the keys are name, socket, ip, mac and rate (%s)", k, functionExample)
		}
	}
	if !functionName.MatchString(s.name) {
		return fmt.Errorf("name=%q: a name is 1 to 32 letters, digits, - or _ (%s)", s.name, functionExample)
	}
	if s.socket == "" {
		return fmt.Errorf("function %s has no socket=PATH (%s)", s.name, functionExample)
	}
	if err := checkSocketPath(s.socket); err != nil {
		return fmt.Errorf("function %s: %v", s.name, strings.Replace(err.Error(), "-socket ", "socket=", 1))
	}
	if ipText == "" {
		ipText = fmt.Sprintf("192.0.2.%d", len(*f)+1)
	}
	ip, err := ownIPv4("ip=", ipText, "the function's own unicast IPv4 address")
	if err != nil {
		return fmt.Errorf("function %s: %v", s.name, err)
	}
	s.ip = ip
	if rateText != "" {
		if s.rate, err = parseRate(rateText); err != nil {
			return fmt.Errorf("function %s: rate=: %v", s.name, err)
		}
	}
	lf := linkFlags{ip: ipText, mac: macText}
	if s.mac, err = lf.macAddr(); err != nil {
		return fmt.Errorf("function %s: %v", s.name, strings.Replace(err.Error(), "-mac ", "mac=", 1))
	}
	for _, o := range *f {
		switch {
		case o.name == s.name:
			return fmt.Errorf("two functions named %s", s.name)
		case o.socket == s.socket:
			return fmt.Errorf("functions %s and %s on one socket %s", o.name, s.name, s.socket)
		case o.ip == s.ip:
			return fmt.Errorf("functions %s and %s with one address %s", o.name, s.name, s.ip)
		case o.mac == s.mac:
			return fmt.Errorf("functions %s and %s with one MAC %s", o.name, s.name, net.HardwareAddr(s.mac[:]))
		}
	}
	*f = append(*f, s)
	return nil
}

// fabricOptions are serve's flags for several functions on one fabric.
type fabricOptions struct {
	functions functionFlags
	uplink    string // a dgram or stream link, or ""
	// uplinkRate is the uplink's rate in bits per second (ethswitch.Port.SetRate), 0 for none.
	uplinkRate float64
	pcap       string
	loss       float64
	faults     faultFlags // in the fabric from the start
	control    string     // the control socket's path, or ""
	debug      bool
}

// runServeFabric checks the flags that go with -function and serves the functions.
func runServeFabric(o fabricOptions, socket string, lc linkFlags, stdout, stderr io.Writer) int {
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "softirdma serve: "+format+"\n", a...)
		return 2
	}
	switch {
	case socket != "":
		return bad("-socket and -function exclude each other: give the socket as -function name=NAME,socket=%s", socket)
	case lc.ip != "" || lc.mac != "":
		return bad("-ip and -mac are each function's with -function: -function name=NAME,socket=PATH,ip=ADDR,mac=MAC")
	case lc.link != "" && !strings.HasPrefix(lc.link, "dgram:") && !strings.HasPrefix(lc.link, "stream:"):
		return bad("-link %q: the fabric's uplink is a dgram or stream link", lc.link)
	}
	if lc.link != "" {
		lc.ip = "192.0.2.1" // the uplink has no address of its own; check wants one
		if err := lc.check(); err != nil {
			return bad("%v", err)
		}
	}
	o.uplink, o.pcap, o.loss = lc.link, lc.pcap, lc.loss
	for _, f := range o.faults {
		if err := checkFaultNames(f, o.senders()); err != nil {
			return bad("-fault %s: %v", f.Spec(), err)
		}
	}
	if o.control != "" {
		if err := checkSocketPath(o.control); err != nil {
			return bad("%s", strings.Replace(err.Error(), "-socket", "-control", 1))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serveFabric(ctx, o, stdout, stderr)
}

// senders are the names a fault's from= may take: the functions', and the uplink's.
func (o *fabricOptions) senders() []string {
	var names []string
	for _, f := range o.functions {
		names = append(names, f.name)
	}
	if o.uplink != "" {
		names = append(names, "uplink")
	}
	return names
}

// serveFabric serves each function on its own socket, all of them on one in-process switch
// (wire/ethswitch) that hands their frames to each other in memory, with the uplink, if any, as
// one more port, until ctx ends.
func serveFabric(ctx context.Context, o fabricOptions, stdout, stderr io.Writer) int {
	log, fail := serveLog(o.debug, stderr)
	sw := ethswitch.New()
	if o.pcap != "" {
		f, err := os.Create(o.pcap)
		if err != nil {
			return fail("cannot create the pcap", err, "pcap", o.pcap)
		}
		defer f.Close()
		pw, err := wire.NewPcapWriter(f)
		if err != nil {
			return fail("cannot write the pcap", err, "pcap", o.pcap)
		}
		// The switch calls its tap under its lock, one frame at a time, in the order it
		// forwards them: the writer needs no lock of its own.
		sw.SetTap(func(_ string, t time.Time, frame []byte) {
			_ = pw.WritePacket(gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(frame), Length: len(frame)}, frame)
		})
	}
	// A guest's netdev on the uplink is a 1500-byte Ethernet, as QEMU's NICs are; between the
	// functions alone frames of a 4096-byte path MTU cross.
	var mtu engine.MTU
	if o.uplink != "" {
		link, err := openSocketLink(o.uplink)
		if err != nil {
			return fail("cannot open the uplink", err, "link", o.uplink)
		}
		up := sw.Uplink("uplink", link)
		defer up.Close()
		if err := up.SetRate(o.uplinkRate); err != nil {
			return fail("cannot shape the uplink", err, "rate", o.uplinkRate)
		}
		go func() {
			if err := up.Run(); err != nil && !errors.Is(err, ethswitch.ErrClosed) && ctx.Err() == nil {
				log.Warn("uplink stopped", "err", err)
			}
		}()
		mtu = activeMTU(1500)
		log.Info("uplink", "link", o.uplink, "rate", o.uplinkRate)
	}
	// The faults: the ones given at the start, and whatever the control socket adds.
	plan := &faultplan.Live{}
	for _, f := range o.faults {
		id := plan.Add(f)
		log.Info("fault added", "id", id, "fault", f.Spec())
	}
	if len(o.faults) > 0 || o.control != "" {
		sw.SetFaults(plan)
	}
	if o.control != "" {
		ctl, err := listenControl(o.control, plan, sw, o.senders(), log)
		if err != nil {
			return fail("cannot make the control socket", err, "control", o.control)
		}
		defer ctl.close()
		go ctl.serve()
		log.Info("control socket", "control", o.control)
		fmt.Fprintf(stdout, "softirdma serve: control socket %s (softirdma fault -socket %s add|list|remove|ports)\n", o.control, o.control)
	}
	guard, guardErr := sockguard.Start()
	if guardErr == nil {
		defer guard.Close()
		log.Info("socket guard", "pid", guard.Pid())
	} else {
		log.Warn("no socket guard: should serve die with a request unread, QEMU 11.1 aborts", "err", guardErr)
	}
	type served struct {
		spec functionSpec
		srv  *vfiouser.Server
	}
	var all []served
	for _, s := range o.functions {
		flog := log.With("function", s.name)
		port := sw.NewPort(s.name)
		if err := port.SetRate(s.rate); err != nil {
			return fail("cannot shape the function's port", err, "function", s.name)
		}
		h, err := realtime.NewHost(realtime.HostConfig{Name: s.name, Link: port, MAC: s.mac, IP: s.ip,
			IPs: []netip.Addr{neigh.LinkLocal(s.mac)}, Answer: true, RxLoss: o.loss, ActiveMTU: mtu})
		if err != nil {
			return fail("cannot make the function's host", err, "function", s.name)
		}
		go h.Run()
		defer h.Close()
		fcfg := hw.Config{Name: s.name, Clock: realtime.NewWallClock(), MAC: s.mac, IP: s.ip, Log: flog, ActiveMTU: mtu,
			Engine:    func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *engine.Device { return h.Rebind(mac, ip, ips) },
			Readdress: h.SetAddresses}
		gone := func(err error) { flog.Info("client gone", "err", err) }
		vcfg := vfiouser.Config{SocketPath: s.socket, Logger: flog, ClientGone: gone}
		if guardErr == nil {
			vcfg.Guard = guard
		}
		srv, _, err := vfioserve.New(vcfg, fcfg)
		if err != nil {
			return fail("cannot make the function", err, "function", s.name)
		}
		if err := srv.Listen(); err != nil {
			return fail("cannot listen", err, "function", s.name, "socket", s.socket)
		}
		defer srv.Close()
		all = append(all, served{s, srv})
		flog.Info("listening", "socket", s.socket, "ip", s.ip, "mac", net.HardwareAddr(s.mac[:]).String())
		fmt.Fprintf(stdout, "softirdma serve: function %s (%s) listening on %s; attach it to QEMU with:\n", s.name, s.ip, s.socket)
		fmt.Fprintf(stdout, "  %s\n", qemuCommandLine(s.socket))
	}
	fmt.Fprintln(stdout, "  # then add each guest's own options to its line: its disk, or -kernel/-initrd/-append, its console")
	// Each function serves its QEMU on its own; one that fails takes only itself down.
	var wg sync.WaitGroup
	failed := make(chan string, len(all))
	for _, a := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.srv.Serve(ctx); err != nil && ctx.Err() == nil {
				log.Error("serving failed", "function", a.spec.name, "socket", a.spec.socket, "err", err)
				failed <- a.spec.name
			}
		}()
	}
	wg.Wait()
	close(failed)
	if len(failed) > 0 {
		return 1
	}
	log.Info("stopped")
	return 0
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
