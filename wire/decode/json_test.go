package decode

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestHex64JSON: a 64-bit value above 2^53 goes through encoding/json as a string and comes back
// exactly; a float64 could not hold it.
func TestHex64JSON(t *testing.T) {
	const big = 1<<53 + 1
	in := Record{RETH: &RETH{VA: big, RKey: 7}, AtomicETH: &AtomicETH{VA: 1<<64 - 8, SwapAdd: 0xfedcba9876543210, Compare: 1}}
	orig := Hex64(1<<63 | 1)
	in.AtomicOrig = &orig
	data, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"reth":{"va":"0x20000000000001","rkey":7,`, `"atomic_eth":{"va":"0xfffffffffffffff8","rkey":0,"swap_add":"0xfedcba9876543210","compare":"0x1"}`, `"atomic_orig":"0x8000000000000001"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("no %s in %s", want, data)
		}
	}
	var generic map[string]any
	if err := json.Unmarshal(data, &generic); err != nil {
		t.Fatal(err)
	}
	if va, ok := generic["reth"].(map[string]any)["va"].(string); !ok || va != "0x20000000000001" {
		t.Errorf("reth.va decodes as %#v", generic["reth"].(map[string]any)["va"])
	}
	var out Record
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out.RETH.VA != big || *out.AtomicETH != *in.AtomicETH || *out.AtomicOrig != orig {
		t.Errorf("round trip: %+v %+v %v", out.RETH, out.AtomicETH, *out.AtomicOrig)
	}
	for _, bad := range []string{`"12345"`, `"0x"`, `"0x1g"`, `"0x10000000000000000"`} {
		var v Hex64
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
