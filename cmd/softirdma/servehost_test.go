package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -host's syntax and its clashes: each mistake is refused with the key or the clash it is about,
// before serve makes anything.
func TestServeHostFlags(t *testing.T) {
	dir := t.TempDir()
	busy := filepath.Join(dir, "busy")
	if err := os.Mkdir(busy, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unixpacket", filepath.Join(busy, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	fn := "name=a,socket=" + filepath.Join(dir, "a.sock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-host", "name=mlx5_0"}, `name="mlx5_0": a host device's name is rxe and 1 to 29`},
		{[]string{"-host", "name=rxe"}, `name="rxe": a host device's name is rxe and 1 to 29`},
		{[]string{"-host", "name=rxe0,colour=red"}, `unknown key "colour": the keys are name, ip and mac`},
		{[]string{"-host", "name=rxe0,ip=10.0.0.1,ip=10.0.0.2"}, "ip= given twice"},
		{[]string{"-host", "name=rxe0,ip"}, "is not KEY=VALUE"},
		{[]string{"-host", "name=rxe0,ip=10.0.0.1/31"}, "host device rxe0: ip=10.0.0.1/31: the prefix length is 8 to 30"},
		{[]string{"-host", "name=rxe0,ip=224.0.0.1"}, "host device rxe0: ip="},
		{[]string{"-host", "name=rxe0,mac=01:00:00:00:00:01"}, "mac=01:00:00:00:00:01 is a multicast"},
		{[]string{"-host", "name=rxe0", "-host", "name=rxe0,ip=10.0.0.9"}, "two host devices named rxe0"},
		{[]string{"-host", "name=rxe0,ip=10.0.0.1", "-host", "name=rxe1,ip=10.0.0.1/16"}, "host devices rxe0 and rxe1 with one address 10.0.0.1"},
		{[]string{"-function", fn + ",ip=192.0.2.101", "-host", "name=rxe0"}, "function a and host device rxe0 with one address 192.0.2.101"},
		{[]string{"-function", "name=rxe0,socket=" + filepath.Join(dir, "a.sock"), "-host", "name=rxe0"}, "function and host device both named rxe0"},
		{[]string{"-function", fn, "-host-dir", dir}, "-host-dir is where -host's devices are served"},
		{[]string{"-host", "name=rxe0", "-host-dir", busy}, "a softirdma serves host programs in " + busy + " already"},
		{[]string{"-host", "name=rxe0", "-host-dir", dir, "-fault", "drop from=rxe9"}, "from=rxe9: the fabric has rxe0"},
	} {
		code, out, errs := runCLI(append([]string{"serve"}, c.args...)...)
		if code != 2 || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("serve %q: exit %d, stdout %q, stderr %q, want %q", c.args, code, out, errs, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("serve made %v before refusing", ents)
	}
}
