// Command genheader writes hw/linux/softirdma_abi.h from the Go package hw/abi; run it with
// `go generate ./hw/abi`.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/softirdma/softirdma/hw/abi/cheader"
)

func main() {
	src := flag.String("src", ".", "the hw/abi package's directory")
	out := flag.String("o", "../linux/softirdma_abi.h", "the header to write")
	flag.Parse()
	consts, err := cheader.ConstsFromSource(*src)
	if err == nil {
		var b bytes.Buffer
		if err = cheader.Generate(&b, consts); err == nil {
			err = os.WriteFile(*out, b.Bytes(), 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "genheader:", err)
		os.Exit(1)
	}
}
