package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/softirdma/softirdma/wire/decode"
)

func init() {
	register("decode", "decode a pcap/pcapng of RoCEv2: every frame, ICRC check, RC flow statistics", runDecode)
}

// runDecode exits 0 when every RoCEv2 frame is well-formed with a valid ICRC, 1 when one is not,
// and 2 when the file cannot be read (or is cut in the middle of a record) or the usage is wrong.
// A capture with a snap length (tcpdump -s 128) is read for the headers it holds: a frame cut after
// them is analysed with its ICRC unchecked and exits 0; one cut inside them exits 1.
func runDecode(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("decode", stderr)
	var opt decode.Options
	fs.BoolVar(&opt.Flows, "flows", false, "add per-flow statistics: RC connections (packets, PSNs, retransmissions, gaps, NAKs, RNR waits, outstanding READs and atomics, rkeys), UC streams (PSN gaps) and UD QP pairs (Q_Keys, MADs by class and attribute)")
	fs.BoolVar(&opt.JSON, "json", false, "print one JSON object per line (frames, flows, summary) instead of text")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma decode [-flows] [-json] FILE|-")
		fmt.Fprintln(stderr, "FILE - reads the capture from standard input (tcpdump -w - ... | softirdma decode -).")
		fmt.Fprintln(stderr, "Prints one line per RoCEv2 frame of a pcap or pcapng capture, then")
		fmt.Fprintln(stderr, "  summary: frames=N rocev2=N icrc_ok=N icrc_bad=N malformed=N")
		fmt.Fprintln(stderr, "and, when the capture cut frames short (tcpdump -s 128), at its end")
		fmt.Fprintln(stderr, "  icrc_unchecked=N headers_cut=N unidentified=N")
		fmt.Fprintln(stderr, "A frame cut after its headers is analysed (icrc=n/a: its ICRC is not in the capture);")
		fmt.Fprintln(stderr, "one cut inside them says where and is not analysed.")
		fmt.Fprintln(stderr, "Exit status: 0 all RoCEv2 frames good (or cut after their headers), 1 any bad ICRC,")
		fmt.Fprintln(stderr, "malformed frame or frame cut inside its headers, 2 unreadable file.")
		fs.PrintDefaults()
	}
	// Flags may come before or after FILE: parse, take the first positional, parse the rest.
	if code, done := parseFlags(fs, args); done {
		return code
	}
	var files []string
	for rest := fs.Args(); len(rest) > 0; rest = fs.Args() {
		files = append(files, rest[0])
		if code, done := parseFlags(fs, rest[1:]); done {
			return code
		}
	}
	switch {
	case len(files) == 0:
		fmt.Fprintln(stderr, "softirdma decode: no capture given: name a pcap or pcapng file, or - for standard input")
		return 2
	case len(files) > 1:
		fmt.Fprintf(stderr, "softirdma decode: one capture at a time, got %d: %q\n", len(files), files)
		return 2
	}
	name, in := files[0], io.Reader(os.Stdin)
	if name == "-" {
		name = "standard input"
	} else {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "softirdma decode: %v\n", err)
			return 2
		}
		defer f.Close()
		in = f
	}
	sum, err := decode.Run(in, stdout, opt)
	if err != nil {
		if errors.Is(err, decode.ErrUnreadable) {
			fmt.Fprintf(stderr, "softirdma decode: %s: %v\n", name, err)
		} else {
			fmt.Fprintf(stderr, "softirdma decode: %s: capture cut short %v\n", name, err)
		}
		return 2
	}
	if !sum.Clean() {
		return 1
	}
	return 0
}
