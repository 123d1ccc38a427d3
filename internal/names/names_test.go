package names

import "testing"

type kind uint8

func TestNames(t *testing.T) {
	table := []string{"", "one", "two"}
	byMap := map[kind]string{1: "one", 7: "seven"}
	for _, c := range []struct {
		got, want string
	}{
		{In(table, kind(1), "kind %d"), "one"},
		{In(table, kind(2), "kind %d"), "two"},
		{In(table, kind(0), "kind %d"), "kind 0"}, // an empty name is no name
		{In(table, kind(3), "kind %d"), "kind 3"}, // beyond the table
		{In(table, kind(255), "0x%02x"), "0xff"},
		{Or(byMap, kind(7), "kind %d"), "seven"},
		{Or(byMap, kind(2), "kind %d"), "kind 2"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
