package hw

import (
	"strings"
	"testing"

	"github.com/softirdma/softirdma/hw/abi/cheader"
)

// The dispatch table runs every command the ABI defines (each Op* constant), and only those.
func TestCtrlCommandsCoverTheABI(t *testing.T) {
	consts, err := cheader.ConstsFromSource("abi")
	if err != nil {
		t.Fatal(err)
	}
	ops := map[uint16]string{}
	for _, c := range consts {
		if strings.HasPrefix(c.Name, "OP_") {
			ops[uint16(c.Value)] = c.Name
			if ctrlCommands[uint16(c.Value)] == nil {
				t.Errorf("%s (0x%02x) has no command", c.Name, c.Value)
			}
		}
	}
	for op := range ctrlCommands {
		if _, ok := ops[op]; !ok {
			t.Errorf("command 0x%02x is no opcode of the ABI", op)
		}
	}
}
