package wire

import (
	"testing"

	"github.com/softirdma/softirdma/internal/forwards"
)

// TestEveryCodecNameForwarded: every exported name of wire/roce is also wire's (roce_names.go),
// so programs written against wire see the whole codec.
func TestEveryCodecNameForwarded(t *testing.T) {
	missing, err := forwards.Missing(".", "roce")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range missing {
		t.Errorf("wire does not forward %s", n)
	}
}
