package main

import "testing"

// A fabric's functions run their doorbells' work where the doorbell is read only when no send
// can wait long: no paced port (the uplink's -rate, a function's rate=) and no stream uplink.
func TestFabricDoorbellRuns(t *testing.T) {
	plain := functionFlags{{Name: "a"}, {Name: "b"}}
	for _, c := range []struct {
		name string
		o    fabricOptions
		want bool
	}{
		{"no uplink", fabricOptions{functions: plain}, true},
		{"a dgram uplink", fabricOptions{functions: plain, uplink: "dgram:127.0.0.1:1,127.0.0.1:2"}, true},
		{"a stream uplink", fabricOptions{functions: plain, uplink: "stream:127.0.0.1:2"}, false},
		{"a paced uplink", fabricOptions{functions: plain, uplink: "dgram:127.0.0.1:1,127.0.0.1:2", uplinkRate: 8e6}, false},
		{"a paced function", fabricOptions{functions: functionFlags{{Name: "a"}, {Name: "b", Rate: 1e9}}}, false},
	} {
		if got := c.o.doorbellRuns(); got != c.want {
			t.Errorf("%s: doorbellRuns() = %v, want %v", c.name, got, c.want)
		}
	}
}
