package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// serve's -rate: a rate in bits per second with k, M or G, from 1k to 400G, for the uplink of a
// fabric only; anything else exits 2 at once with one line saying what it takes.
func TestServeRateFlag(t *testing.T) {
	dir := t.TempDir()
	fn := "name=a,socket=" + filepath.Join(dir, "a.sock")
	up := "dgram:127.0.0.1:9,127.0.0.1:9"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-function", fn, "-link", up, "-rate", "fast"},
			"softirdma serve: -rate: \"fast\" is not a rate: bits per second, a number with k, M or G after it (e.g. 8M, 1.5G)\n"},
		{[]string{"-function", fn, "-link", up, "-rate", "NaNM"},
			"softirdma serve: -rate: \"NaNM\" is not a rate: bits per second, a number with k, M or G after it (e.g. 8M, 1.5G)\n"},
		{[]string{"-function", fn, "-link", up, "-rate", "999"}, "softirdma serve: -rate: 999 is out of range: 1k to 400G bits per second\n"},
		{[]string{"-function", fn, "-link", up, "-rate", "401G"}, "softirdma serve: -rate: 401G is out of range: 1k to 400G bits per second\n"},
		{[]string{"-function", fn, "-link", up, "-rate", "-8M"}, "softirdma serve: -rate: -8M is out of range: 1k to 400G bits per second\n"},
		{[]string{"-function", fn, "-rate", "8M"}, "softirdma serve: -rate is the uplink's: give the uplink with -link dgram:... or stream:...\n"},
		{[]string{"-socket", filepath.Join(dir, "s.sock"), "-rate", "8M"},
			"softirdma serve: -rate shapes the uplink of -function's fabric: give the functions with -function name=NAME,socket=PATH and the uplink with -link\n"},
	} {
		code, out, errOut := runCLI(append([]string{"serve"}, c.args...)...)
		if code != 2 || errOut != c.want || out != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2 and %q", c.args, code, errOut, out, c.want)
		}
	}
	for _, c := range []struct{ value, want string }{
		{fn + ",rate=fast", "function a: rate=: \"fast\" is not a rate"},
		{fn + ",rate=1G,rate=2G", "function a: rate= given twice (rate=1G and rate=2G)"},
		{fn + ",rate=500", "function a: rate=: 500 is out of range: 1k to 400G bits per second"},
	} {
		var f functionFlags
		if err := f.Set(c.value); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("-function %s: %v, want %q", c.value, err, c.want)
		}
	}
	var f functionFlags
	if err := f.Set(fn + ",rate=1.5G"); err != nil || f[0].Rate != 1.5e9 {
		t.Errorf("-function %s,rate=1.5G: %v, rate %g", fn, err, f[0].Rate)
	}
	for in, want := range map[string]float64{"8M": 8e6, "1.5G": 1.5e9, "64k": 64e3, "400G": 400e9, "2500": 2500} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %g, %v; want %g", in, got, err, want)
		}
	}
}

// serve's and hostd's -send-window is checked before anything opens: for serve's one
// function, for a fabric's, and for hostd's rxe0.
func TestSendWindowFlagChecked(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"serve", "-socket", filepath.Join(dir, "s.sock")},
		{"serve", "-function", "name=a,socket=" + filepath.Join(dir, "a.sock")},
		{"hostd", "-dir", dir},
	} {
		for _, v := range []string{"0", "-3", "32769"} {
			all := append(append([]string(nil), args...), "-send-window", v)
			want := "softirdma " + args[0] + ": -send-window " + v + " is out of range (1..32768)\n"
			if code, out, errOut := runCLI(all...); code != 2 || errOut != want || out != "" {
				t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2 and %q", all, code, errOut, out, want)
			}
		}
	}
}
