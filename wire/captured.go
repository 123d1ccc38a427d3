package wire

import "github.com/softirdma/softirdma/wire/roce"

// CutInside names the header in which the bytes given to the parser ended ("UDP header", "BTH",
// "RETH", ...), or "" when err is not that: see roce.CutInside.
func CutInside(err error) string { return roce.CutInside(err) }
