package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/softirdma/softirdma/fabric"
	"github.com/softirdma/softirdma/host/daemon"
	"github.com/softirdma/softirdma/host/hostdev"
)

// maxHostDevices bounds -host: each is an engine, and a GID table in every program's sysfs.
const maxHostDevices = 16

// hostFlags collects the -host flags, each checked as it is given: devices of serve's fabric
// for programs on this machine (softirdma run).
type hostFlags []hostdev.Spec

const hostExample = "e.g. -host name=rxe0,ip=192.0.2.100/24"

// hostName is a host device's name: rdma-core's rxe provider binds a device it finds through
// sysfs by a name that starts with rxe.
var hostName = regexp.MustCompile(`^rxe[A-Za-z0-9_]{1,29}$`)

func (h *hostFlags) String() string {
	var names []string
	for _, s := range *h {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

// Set parses name=NAME[,ip=ADDR[/BITS]][,mac=MAC]. Without ip the device gets 192.0.2.(100+N)/24,
// N its position; without mac, 02:00 and the four bytes of its address.
func (h *hostFlags) Set(v string) error {
	if len(*h) == maxHostDevices {
		return fmt.Errorf("at most %d host devices", maxHostDevices)
	}
	given, err := flagKeys(v, "host device", hostExample, "name", "ip", "mac")
	if err != nil {
		return err
	}
	s := hostdev.Spec{Name: given["name"]}
	if !hostName.MatchString(s.Name) {
		return fmt.Errorf("name=%q: a host device's name is rxe and 1 to 29 letters, digits or _, as rdma-core's rxe provider binds by name (%s)", s.Name, hostExample)
	}
	text := given["ip"]
	if text == "" {
		text = fmt.Sprintf("192.0.2.%d", 100+len(*h)+1)
	}
	addr, bits, ok := splitPrefix(text)
	if !ok {
		return fmt.Errorf("host device %s: ip=%s: the prefix length is 8 to 30", s.Name, text)
	}
	ip, err := ownIPv4("ip=", addr, "the device's own unicast IPv4 address")
	if err != nil {
		return fmt.Errorf("host device %s: %v", s.Name, err)
	}
	s.IP = netip.PrefixFrom(ip, bits)
	lf := linkFlags{ip: addr, mac: given["mac"]}
	if s.MAC, err = lf.macAddr(); err != nil {
		return fmt.Errorf("host device %s: %v", s.Name, strings.Replace(err.Error(), "-mac ", "mac=", 1))
	}
	for _, o := range *h {
		switch {
		case o.Name == s.Name:
			return fmt.Errorf("two host devices named %s", s.Name)
		case o.IP.Addr() == s.IP.Addr():
			return fmt.Errorf("host devices %s and %s with one address %s", o.Name, s.Name, ip)
		case o.MAC == s.MAC:
			return fmt.Errorf("host devices %s and %s with one MAC %s", o.Name, s.Name, net.HardwareAddr(s.MAC[:]))
		}
	}
	*h = append(*h, s)
	return nil
}

// checkHosts refuses host devices that clash with a function (a name is a port's, and a
// fault's from=; an address or a MAC is one station's on the fabric).
func checkHosts(hosts hostFlags, fns functionFlags) error {
	for _, h := range hosts {
		for _, f := range fns {
			switch {
			case f.Name == h.Name:
				return fmt.Errorf("function and host device both named %s", h.Name)
			case f.IP == h.IP.Addr():
				return fmt.Errorf("function %s and host device %s with one address %s", f.Name, h.Name, f.IP)
			case f.MAC == h.MAC:
				return fmt.Errorf("function %s and host device %s with one MAC %s", f.Name, h.Name, net.HardwareAddr(f.MAC[:]))
			}
		}
	}
	return nil
}

// hostDir is where serve serves its host devices: -host-dir, or the folder softirdma run uses
// by default. No softirdma may serve there already.
func hostDir(given string) (string, error) {
	dir := given
	if dir == "" {
		var err error
		if dir, err = runtimeDir(); err != nil {
			return "", err
		}
	} else if err := checkSocketPath(filepath.Join(dir, "sock")); err != nil {
		return "", fmt.Errorf("-host-dir: %v", strings.Replace(err.Error(), "-socket ", "", 1))
	}
	if reachable(filepath.Join(dir, "sock")) {
		return "", fmt.Errorf("a softirdma serves host programs in %s already: 'softirdma stop -socket %s' first, or give -host-dir another folder",
			dir, filepath.Join(dir, "sock"))
	}
	return dir, nil
}

// servedHosts are serve's host devices and the daemon that serves programs on them.
type servedHosts struct {
	set    *hostdev.Set
	kernel kernelDevices
	dm     *daemon.Daemon
	sock   string
	done   chan error
}

// serveHostDevices adds the host devices to the fabric and serves programs on them in dir
// (DIR/sock, the sysfs tree DIR/sys, DIR/pid and DIR/version, as hostd does, so that softirdma
// run, status and stop find it) until ctx ends.
func serveHostDevices(ctx context.Context, fab *fabric.Fabric, hosts hostFlags, dir string, log *slog.Logger, stdout io.Writer) (*servedHosts, error) {
	specs := make([]hostdev.Spec, len(hosts))
	for i, h := range hosts {
		h.MTU = fab.ActiveMTU()
		specs[i] = h
	}
	kd := findKernelDevices(log)
	for _, sp := range specs {
		if kd.has(sp.Name) {
			log.Warn("the kernel has a device of this name too: programs under softirdma run -kernel see two", "device", sp.Name)
		}
	}
	set, err := hostdev.New(fab, specs, kd.config(hostdev.Config{Log: log}))
	if err != nil {
		kd.close()
		return nil, err
	}
	if fab.Captures() {
		// Two programs on one device reach each other through its loopback, which never
		// crosses the switch: the capture shows it there, numbered among the rest.
		for i, e := range set.Engines {
			name := specs[i].Name
			e.OnLoopback(func(frame []byte) { fab.Record(name, frame) })
		}
	}
	hp := &servedHosts{set: set, kernel: kd, sock: filepath.Join(dir, "sock"), done: make(chan error, 1)}
	err = writeHostDir(dir, set, kd)
	if err == nil {
		_ = os.Remove(hp.sock)
		hp.dm, err = daemon.Listen(daemon.Config{Socket: hp.sock, Devices: set.Devices, UverbsBase: set.UverbsBase,
			Netlink: set.Netlink, RdmaCM: set.RdmaCM, Log: log, Memory: daemon.MemoryAuto})
	}
	if err != nil {
		set.Close()
		kd.close()
		return nil, err
	}
	go func() { hp.done <- hp.dm.Serve(ctx) }()
	for _, s := range specs {
		log.Info("host device", "device", s.Name, "ip", s.IP, "mac", net.HardwareAddr(s.MAC[:]).String())
		fmt.Fprintf(stdout, "softirdma serve: host device %s (%s, GID 3), for programs on this machine\n", s.Name, s.IP)
	}
	fmt.Fprintf(stdout, "  softirdma run -socket %s -- CMD ARGS...   # e.g. ibv_devices, ib_write_bw -d %s -x 3\n", hp.sock, specs[0].Name)
	return hp, nil
}

// writeHostDir lays out dir for programs (the sysfs trees) and for softirdma run, status and
// stop: who serves here, for run to join (the same build) or replace (another, when idle), and
// for stop; a softirdma says it itself, however it was started.
func writeHostDir(dir string, set *hostdev.Set, kd kernelDevices) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := kd.writeTrees(dir, set.Tree); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "version"), []byte(buildIdentity()+"\n"), 0o600)
}

// close stops serving programs (their files fail from then on) and the devices.
func (hp *servedHosts) close() {
	hp.dm.Close()
	<-hp.done
	os.Remove(hp.sock)
	hp.set.Close()
	hp.kernel.close()
}
