// Package cheader writes the C header of the device ABI (hw/abi) for the guest's Linux driver,
// so the layouts exist once, in Go: every constant a driver needs and every structure, with
// its fields at their offsets and a static assertion of each offset and size.
package cheader

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	"github.com/softirdma/softirdma/hw/abi"
)

// Generate writes the header. Constants are given as name/value pairs so that the generator
// does not need reflection over the package.
func Generate(w io.Writer, consts []Const) error {
	var b strings.Builder
	b.WriteString("/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */\n")
	b.WriteString("/* Generated from the Go package hw/abi by `go generate ./hw/abi`; do not edit. */\n")
	b.WriteString("#ifndef SOFTIRDMA_ABI_H\n#define SOFTIRDMA_ABI_H\n\n#include <linux/types.h>\n")
	b.WriteString("#ifdef __KERNEL__\n#include <linux/build_bug.h>\n#include <linux/stddef.h>\n#else\n#include <assert.h>\n#include <stddef.h>\n#endif\n")
	b.WriteString("#ifndef __packed\n#define __packed __attribute__((packed))\n#endif\n\n")
	for _, c := range consts {
		fmt.Fprintf(&b, "#define SOFTIRDMA_%s 0x%x\n", c.Name, c.Value)
	}
	for _, l := range abi.Layouts {
		b.WriteString("\n")
		if err := writeStruct(&b, l); err != nil {
			return err
		}
	}
	b.WriteString("\n#endif /* SOFTIRDMA_ABI_H */\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Const is one #define.
type Const struct {
	Name  string
	Value uint64
}

// writeStruct lays a structure out as C: the fields of union arms as a union of structs, gaps
// as reserved bytes, and static assertions of every offset and of the size.
func writeStruct(b *strings.Builder, l abi.Layout) error {
	fields := append([]abi.Field(nil), l.Fields...)
	sort.SliceStable(fields, func(i, j int) bool { return fields[i].Off < fields[j].Off })
	fmt.Fprintf(b, "struct softirdma_%s {\n", l.Name)
	pos, pad := 0, 0
	for _, g := range groupFields(fields) {
		if g.off < pos {
			return fmt.Errorf("%s: fields overlap at %d", l.Name, g.off)
		}
		if g.off > pos {
			fmt.Fprintf(b, "\t__u8 rsvd%d[%d];\n", pad, g.off-pos)
			pad++
		}
		g.write(b)
		pos = g.end
	}
	if pos < l.Size {
		fmt.Fprintf(b, "\t__u8 rsvd%d[%d];\n", pad, l.Size-pos)
	}
	b.WriteString("} __packed;\n")
	fmt.Fprintf(b, "static_assert(sizeof(struct softirdma_%s) == %d);\n", l.Name, l.Size)
	for _, f := range fields {
		path := f.Name
		if f.Union != "" {
			path = f.Union + "." + f.Name
		}
		fmt.Fprintf(b, "static_assert(offsetof(struct softirdma_%s, %s) == %d);\n", l.Name, path, f.Off)
	}
	return nil
}

// fieldGroup is what a structure lays out at one place: a plain field, or a union of arms.
type fieldGroup struct {
	off, end int
	plain    *abi.Field
	order    []string               // the union's arms, in the order the fields name them
	arms     map[string][]abi.Field // each arm's fields
}

// groupFields groups fields (sorted by offset) in offset order: each plain field alone, and
// the arms whose spans overlap in one union; an arm is all the fields that name it.
func groupFields(fields []abi.Field) []*fieldGroup {
	arms := map[string][]abi.Field{}
	var armOrder []string
	var groups []*fieldGroup
	for i, f := range fields {
		if f.Union == "" {
			groups = append(groups, &fieldGroup{off: f.Off, end: f.Off + f.Size, plain: &fields[i]})
			continue
		}
		if _, ok := arms[f.Union]; !ok {
			armOrder = append(armOrder, f.Union)
		}
		arms[f.Union] = append(arms[f.Union], f)
	}
	var unions []*fieldGroup
	for _, name := range armOrder {
		fs := arms[name]
		off, end := fs[0].Off, 0
		for _, f := range fs {
			end = max(end, f.Off+f.Size)
		}
		var g *fieldGroup
		for _, u := range unions {
			if off < u.end && u.off < end {
				g = u
			}
		}
		if g == nil {
			g = &fieldGroup{off: off, end: end, arms: map[string][]abi.Field{}}
			unions = append(unions, g)
		}
		g.off, g.end = min(g.off, off), max(g.end, end)
		g.order = append(g.order, name)
		g.arms[name] = fs
	}
	groups = append(groups, unions...)
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].off < groups[j].off })
	return groups
}

// write lays the group out: a plain field's line, or a union of one struct per arm, each arm
// starting where the union does, padded to its first field.
func (g *fieldGroup) write(b *strings.Builder) {
	if g.plain != nil {
		b.WriteString("\t" + cField(*g.plain) + ";\n")
		return
	}
	b.WriteString("\tunion {\n")
	for _, arm := range g.order {
		b.WriteString("\t\tstruct {\n")
		apos, apad := g.off, 0
		for _, f := range g.arms[arm] {
			if f.Off > apos {
				fmt.Fprintf(b, "\t\t\t__u8 rsvd%d[%d];\n", apad, f.Off-apos)
				apad++
			}
			b.WriteString("\t\t\t" + cField(f) + ";\n")
			apos = f.Off + f.Size
		}
		fmt.Fprintf(b, "\t\t} %s;\n", arm)
	}
	b.WriteString("\t};\n")
}

func cField(f abi.Field) string {
	switch {
	case f.Array:
		return fmt.Sprintf("__u8 %s[%d]", f.Name, f.Size)
	case f.Size == 1:
		return "__u8 " + f.Name
	}
	return fmt.Sprintf("__le%d %s", f.Size*8, f.Name)
}

// ConstsFromSource type-checks the Go package in dir (hw/abi, which imports nothing) and
// returns its exported integer constants in source order, named for C: PCIVendorID becomes
// PCI_VENDOR_ID.
func ConstsFromSource(dir string) ([]Const, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}}
	if _, err := (&types.Config{}).Check("abi", fset, files, info); err != nil {
		return nil, err
	}
	var out []Const
	seen := map[string]string{} // C name → Go name
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					c, ok := info.Defs[name].(*types.Const)
					if !ok || !name.IsExported() {
						continue
					}
					v, exact := constant.Uint64Val(constant.ToInt(c.Val()))
					if !exact {
						return nil, fmt.Errorf("%s is not a non-negative integer", name.Name)
					}
					cn := cName(name.Name)
					if other, dup := seen[cn]; dup {
						return nil, fmt.Errorf("%s and %s are both %s in C", other, name.Name, cn)
					}
					seen[cn] = name.Name
					out = append(out, Const{Name: cn, Value: v})
				}
			}
		}
	}
	return out, nil
}

// cName turns a Go name into upper snake case, keeping acronyms whole: a run of capitals is
// split into the acronyms it is made of (CQEQPNum is CQE_QP_NUM, not CQEQP_NUM), and a single
// capital before Key or Tag joins it (PKeyIndex is PKEY_INDEX, STag STAG), as the verbs API
// spells them.
func cName(s string) string {
	var words []string
	for _, w := range camelWords(s) {
		if isCaps(w) && len(w) > 1 {
			words = append(words, splitAcronyms(w)...)
		} else {
			words = append(words, w)
		}
	}
	var out []string
	for i := 0; i < len(words); i++ {
		w := strings.ToUpper(words[i])
		if len(w) == 1 && i+1 < len(words) && (words[i+1] == "Key" || words[i+1] == "Tag") {
			w += strings.ToUpper(words[i+1])
			i++
		}
		out = append(out, w)
	}
	return strings.Join(out, "_")
}

// camelWords splits a Go name into its words: capitalized words, runs of capitals (the last
// capital of a run before a lower-case letter starts the next word), digits staying with the
// word before them.
func camelWords(s string) []string {
	r := []rune(s)
	var words []string
	start := 0
	for i := 1; i < len(r); i++ {
		c, prev := r[i], r[i-1]
		nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
		if unicode.IsUpper(c) && (unicode.IsLower(prev) || unicode.IsDigit(prev) || unicode.IsUpper(prev) && nextLower) {
			words = append(words, string(r[start:i]))
			start = i
		}
	}
	return append(words, string(r[start:]))
}

func isCaps(w string) bool {
	for _, c := range w {
		if !unicode.IsUpper(c) {
			return false
		}
	}
	return true
}

// acronyms are the ones the ABI's names are made of.
var acronyms = map[string]bool{
	"ABI": true, "AH": true, "AV": true, "BAR": true, "CQ": true, "CQE": true, "DGID": true, "DLID": true,
	"DMA": true, "DMAC": true, "EQ": true, "GID": true, "GSI": true, "ID": true, "IOVA": true, "IRQ": true,
	"MAC": true, "MR": true, "MSIX": true, "MTU": true, "MW": true, "PBA": true, "PCI": true, "PD": true,
	"PL": true, "PSN": true, "QH": true, "QP": true, "QPN": true, "RQ": true, "SGE": true, "SGID": true,
	"SL": true, "SLID": true, "SQ": true, "SRQ": true, "UD": true, "WC": true, "WQE": true, "WR": true,
}

// splitAcronyms splits a run of capitals into the fewest acronyms that spell it, a capital left
// over standing alone (the P of PKey); a run no such split spells stays whole.
func splitAcronyms(run string) []string {
	// best[i] is the fewest words spelling run[:i], with at most one lone capital, at the end.
	n := len(run)
	best := make([][]string, n+1)
	best[0] = []string{}
	for i := 1; i <= n; i++ {
		for j := 0; j < i; j++ {
			w := run[j:i]
			lone := len(w) == 1 && i == n
			if best[j] == nil || !acronyms[w] && !lone {
				continue
			}
			if best[i] == nil || len(best[j])+1 < len(best[i]) {
				best[i] = append(append([]string{}, best[j]...), w)
			}
		}
	}
	if best[n] == nil {
		return []string{run}
	}
	return best[n]
}
