package perftest

import (
	"context"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// TestSendLatency runs ib_send_lat with softirdma on both ends: each side prints perftest's
// latency header and a result line of its own, with 8-byte messages, and measured positive
// round trips in order (min <= median <= p99 <= max).
func TestSendLatency(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 7)
	l, _ := net.Listen("tcp4", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	qpTimeout := 18 // as TestTests: a loaded machine under the race detector is slow to answer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, c := ctrltest.Both(func(out io.Writer) (Result, error) {
		return Run(ctx, hs.Device(), Options{Test: SendLat, Server: true, Host: "127.0.0.1", Port: port, Size: 8, Iters: 200, GID: hs.Device().IP(), QPTimeout: &qpTimeout}, out)
	}, func(out io.Writer) (Result, error) {
		return Run(ctx, hc.Device(), Options{Test: SendLat, Host: "127.0.0.1", Port: port, Size: 8, Iters: 200, GID: hc.Device().IP(), Wait: 20 * time.Second, QPTimeout: &qpTimeout}, out)
	})
	ctrltest.BothSucceeded(t, s, c)
	line := regexp.MustCompile(`(?m)^ 8 +200(\s+[0-9]+\.[0-9]{2}){7}\s*$`)
	for side, r := range map[string]*ctrltest.Outcome[Result]{"server": s, "client": c} {
		out := r.Out.String()
		if !strings.Contains(out, "Send Latency Test") || !strings.Contains(out, " t_typical[usec]") || !line.MatchString(out) {
			t.Fatalf("%s's output:\n%s", side, out)
		}
		l := r.Res.Latency
		if l.Min <= 0 || l.Min > l.Typical || l.Typical > l.P99 || l.P99 > l.Max || l.Avg < l.Min || l.Avg > l.Max {
			t.Fatalf("%s's latency %+v", side, l)
		}
		if r.Res.Size != 8 || r.Res.Iters != 200 {
			t.Fatalf("%s's report %+v", side, r.Res.Report)
		}
	}
}

// latencyOf follows print_report_lat: 10 posts make 9 round trips, of which the 2 longest go;
// the median of the 7 left is the 4th, the percentiles index ceil(7*p), t_max is the first
// left out, every figure half a round trip.
func TestLatencyOf(t *testing.T) {
	start := time.Unix(0, 0)
	rtts := []time.Duration{10, 2, 4, 6, 8, 100, 12, 14, 200} // microseconds, unsorted
	posted := []time.Time{start}
	for _, d := range rtts {
		posted = append(posted, posted[len(posted)-1].Add(d*time.Microsecond))
	}
	us := time.Microsecond
	got := latencyOf(posted)
	// Sorted: 2 4 6 8 10 12 14 | 100 200. n = 7.
	want := Latency{Min: 1 * us, Max: 50 * us, Typical: 4 * us, Avg: 4 * us, P99: 50 * us, P999: 50 * us}
	// Deviations from 4 us of 1 2 3 4 5 6 7 (halved): 3 2 1 0 1 2 3, squared 28 over 7: 2 us.
	want.Stdev = 2 * us
	if got != want {
		t.Fatalf("latency %+v\nwant    %+v", got, want)
	}
	// An even count takes the mean of the middle two: 11 posts, 8 kept.
	posted = append(posted, posted[len(posted)-1].Add(16*us))
	if got := latencyOf(posted); got.Typical != (8+10)*us/4 {
		t.Fatalf("median of an even count %v, want %v", got.Typical, (8+10)*us/4)
	}
}
