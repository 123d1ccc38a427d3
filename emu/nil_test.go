package emu_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu"
)

// TestFacadeNilArguments: emu's forwarding functions pass a nil on to the engine, which refuses
// it with EINVAL naming it instead of panicking.
func TestFacadeNilArguments(t *testing.T) {
	fab := emu.NewFabric(emu.NewSim(), 1)
	a := fab.AddDevice("A", emu.LinkConfig{})
	pd := must(a.AllocPD())
	cq := must(a.CreateCQ(4))
	qp := must(pd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cq, RecvCQ: cq}))
	for name, err := range map[string]error{
		"ConnectRC(qp, nil)": emu.ConnectRC(qp, nil, emu.ConnectOptions{}),
		"ConnectUC(nil, qp)": emu.ConnectUC(nil, qp, emu.MTU1024),
	} {
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", name, err)
		}
	}
}

// TestFacadeAddDeviceChecked: the simulator's checked AddDevice is emu's too, refusing what
// AddDevice clamps or takes twice.
func TestFacadeAddDeviceChecked(t *testing.T) {
	fab := emu.NewFabric(emu.NewSim(), 1)
	if _, err := fab.AddDeviceChecked("A", emu.LinkConfig{Loss: 2}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("loss 2: %v", err)
	}
	must(fab.AddDeviceChecked("A", emu.LinkConfig{}))
	if _, err := fab.AddDeviceChecked("A", emu.LinkConfig{}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a second A: %v", err)
	}
	if err := (emu.LinkConfig{Rate: -1}).Validate(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("rate -1: %v", err)
	}
}
