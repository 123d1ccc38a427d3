package driver_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/driver"
	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/neigh"
)

// switchFunction is one function on an in-process switch, driven by the Go driver: a PD, an MR
// whose first half takes every peer's WRITE (a 4 KiB slot per peer) and whose second half is
// what it sends, a CQ, and a QP per peer.
type switchFunction struct {
	bus  *clientBus
	d    *driver.Driver
	ip   netip.Addr
	mr   driver.MR
	cq   *driver.CQ
	qps  []*driver.QP // by peer index; nil for itself
	host *emu.Host
	port *ethswitch.Port
	pd   uint32
}

// newSwitchFunction is function i (MAC 02:00:00:00:01:i, 192.0.2.10+i) on a port of sw, on its
// own realtime host, through the in-process transport: a PD, an MR of mrSize bytes, a CQ of 64.
func newSwitchFunction(tb testing.TB, sw *ethswitch.Switch, i int, mrSize uint64) *switchFunction {
	mac := [6]byte{2, 0, 0, 0, 1, byte(i)}
	ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)})
	port := sw.NewPort(fmt.Sprint("fn", i))
	h, err := emu.NewHost(emu.HostConfig{Name: fmt.Sprint("fn", i), Link: port, MAC: mac, IP: ip,
		IPs: []netip.Addr{neigh.LinkLocal(mac)}, Answer: true})
	must(tb, err)
	go h.Run()
	tb.Cleanup(func() { h.Close() })
	f := &switchFunction{ip: ip, host: h, port: port}
	f.bus = inProcess(tb, func(c *hw.Config) {
		c.Name, c.MAC, c.IP = fmt.Sprint("fn", i), mac, ip
		c.Clock = emu.NewWallClock()
		c.Engine = func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *emu.Device { return h.Rebind(mac, ip, ips) }
		c.Readdress = h.SetAddresses
	})
	f.d, err = driver.Open(f.bus, driver.Arena{Base: ramBase, Size: ramSize})
	must(tb, err)
	f.pd, err = f.d.AllocPD()
	must(tb, err)
	f.mr, err = f.d.RegMR(f.pd, mrSize, allAccess)
	must(tb, err)
	f.cq, err = f.d.CreateCQ(6, nil)
	must(tb, err)
	return f
}

// pattern is what function from writes into function to's slot.
func pattern(from, to int) []byte {
	b := make([]byte, 4096)
	for i := range b {
		b[i] = byte(from*31 + to*7 + i)
	}
	return b
}

// Sixteen functions on one switch (wire/ethswitch), each on its own realtime host, each with an
// RC QP to every other one: all 240 QPs write 4 KiB into their peer's memory at once, every
// frame handed over in memory. Each write lands whole in its own slot, each completion is a
// success, and ARP found every peer through the switch's floods.
func TestSixteenFunctionsOneSwitch(t *testing.T) {
	const n = 16
	sw := ethswitch.New()
	fns := make([]*switchFunction, n)
	ports := make([]*ethswitch.Port, n)
	for i := range fns {
		f := newSwitchFunction(t, sw, i, 2*n*4096)
		ports[i] = f.port
		var err error
		f.qps = make([]*driver.QP, n)
		for j := range n {
			if j == i {
				continue
			}
			f.qps[j], err = f.d.CreateQP(f.pd, f.cq, f.cq, driver.QPCaps{SendLog: 3, RecvLog: 3, MaxSendSGE: 1, MaxRecvSGE: 1})
			must(t, err)
			must(t, f.bus.WriteMem(f.mr.Addr+uint64(n+j)*4096, pattern(i, j)))
		}
		fns[i] = f
	}
	for i, f := range fns {
		for j, q := range f.qps {
			if q == nil {
				continue
			}
			toRTS(t, q, fns[j].qps[i].Num, fns[j].ip.As16(), 2)
		}
	}
	// Every QP writes at once; each function waits for its own 15 completions.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, f := range fns {
		for j, q := range f.qps {
			if q == nil {
				continue
			}
			must(t, q.PostSend(driver.SendWR{ID: uint64(j), Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled,
				SGL:        []driver.SGE{{Addr: f.mr.Addr + uint64(n+j)*4096, Length: 4096, Key: f.mr.Key}},
				RemoteAddr: fns[j].mr.Addr + uint64(i)*4096, RKey: fns[j].mr.Key}))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(60 * time.Second)
			for got := 0; got < n-1; {
				wcs, err := f.cq.Poll(n)
				if err != nil {
					errs <- err
					return
				}
				for _, wc := range wcs {
					if wc.Status != 0 {
						errs <- fmt.Errorf("function %d: completion %+v", i, wc)
						return
					}
				}
				got += len(wcs)
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("function %d: %d of %d completions in 60 s", i, got, n-1)
					return
				}
				if len(wcs) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	for j, f := range fns {
		for i := range n {
			if i == j {
				continue
			}
			must(t, f.bus.ReadMem(f.mr.Addr+uint64(i)*4096, got))
			if !bytes.Equal(got, pattern(i, j)) {
				t.Fatalf("function %d's slot for function %d does not hold its WRITE", j, i)
			}
		}
	}
	// Each function's 15 WRITEs (4 KiB in 1 KiB packets) crossed its port, and the switch
	// dropped nothing.
	for i, p := range ports {
		st, dropped := p.Stats()
		if st.TxFrames < 4*(n-1) || st.RxFrames < 4*(n-1) || dropped != 0 {
			t.Errorf("port %d: %+v, %d dropped", i, st, dropped)
		}
	}
}
