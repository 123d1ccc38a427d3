package keys

import (
	"flag"
	"os"
	"testing"
)

// TestMain gives the property tests longer runs than rapid's defaults (30 steps), which are
// too short to build up bound windows and then misuse them. Flags given on the command line
// win.
func TestMain(m *testing.M) {
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, value := range map[string]string{"rapid.steps": "200", "rapid.checks": "300"} {
		if !set[name] {
			_ = flag.Set(name, value)
		}
	}
	os.Exit(m.Run())
}
