package abi

import "testing"

// Every field lies inside its structure, is aligned to its size (numbers) and overlaps no
// other field except members of other arms of its union; the control entry's arguments hold
// every command's.
func TestLayoutsAreSound(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range Layouts {
		if seen[l.Name] {
			t.Errorf("%s listed twice", l.Name)
		}
		seen[l.Name] = true
		for i, f := range l.Fields {
			if f.Off < 0 || f.Size <= 0 || f.Off+f.Size > l.Size {
				t.Errorf("%s.%s [%d,+%d) outside %d bytes", l.Name, f.Name, f.Off, f.Size, l.Size)
			}
			if !f.Array && (f.Size&(f.Size-1) != 0 || f.Size > 8 || f.Off%f.Size != 0) {
				t.Errorf("%s.%s: a %d-byte number at %d", l.Name, f.Name, f.Size, f.Off)
			}
			for _, g := range l.Fields[i+1:] {
				overlap := f.Off < g.Off+g.Size && g.Off < f.Off+f.Size
				if overlap && (f.Union == "" || g.Union == "" || f.Union == g.Union) {
					t.Errorf("%s: %s [%d,+%d) overlaps %s [%d,+%d)", l.Name, f.Name, f.Off, f.Size, g.Name, g.Off, g.Size)
				}
			}
		}
	}
	// Every command's arguments fit in an entry.
	args := CtrlEntrySize - CtrlArgs
	for _, l := range Layouts {
		if l.Name == "ctrl_entry" || len(l.Name) < 5 || l.Name[len(l.Name)-5:] != "_args" {
			continue
		}
		if l.Size > args {
			t.Errorf("%s needs %d bytes of arguments, an entry has %d", l.Name, l.Size, args)
		}
	}
	if n := 4 * QueryDeviceWords; n > args {
		t.Errorf("query_device answers %d bytes, an entry has %d", n, args)
	}
}

// The sizes rdma/rdma_user_rxe.h and ib_user_verbs.h fix, which rdma-core's rxe provider
// compiles in: a device that disagreed would read the provider's WQEs wrong.
func TestRXEUAPISizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"struct rxe_queue_buf (header)", QueueHeaderSize, 4 * (2 + 30 + 1 + 31 + 1 + 31)},
		{"struct rxe_send_wqe", SendWQESize, 208},
		{"struct rxe_send_wr", SendStatus, 144},
		{"rxe_send_wr's union", SendStatus - SendWRUnion, 120},
		{"struct rxe_av", RXEAVSize, 88},
		{"struct rxe_recv_wqe", RecvWQESize, 40},
		{"struct rxe_sge", SGESize, 16},
		{"struct ib_uverbs_wc", CQESize, 48},
		{"ud.av offset", SendAV, 56},
		{"ud.av end", SendAV + RXEAVSize, SendStatus},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, c.got, c.want)
		}
	}
	if RegWRPages+PageListSize > SendStatus {
		t.Errorf("the REG_MR work request's fields end at %d, past the union", RegWRPages+PageListSize)
	}
	if MaxQPSlots != 4096 || MaxCQSlots != 4096 {
		t.Errorf("doorbell slots %d QPs, %d CQs", MaxQPSlots, MaxCQSlots)
	}
}
