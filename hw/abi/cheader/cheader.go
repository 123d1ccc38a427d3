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
	// A union is the arms whose spans overlap; each arm is all the fields that name it.
	type group struct {
		off, end int
		plain    *abi.Field
		order    []string
		arms     map[string][]abi.Field
	}
	arms := map[string][]abi.Field{}
	var armOrder []string
	var groups []*group
	for i, f := range fields {
		if f.Union == "" {
			groups = append(groups, &group{off: f.Off, end: f.Off + f.Size, plain: &fields[i]})
			continue
		}
		if _, ok := arms[f.Union]; !ok {
			armOrder = append(armOrder, f.Union)
		}
		arms[f.Union] = append(arms[f.Union], f)
	}
	var unions []*group
	for _, name := range armOrder {
		fs := arms[name]
		off, end := fs[0].Off, 0
		for _, f := range fs {
			end = max(end, f.Off+f.Size)
		}
		var g *group
		for _, u := range unions {
			if off < u.end && u.off < end {
				g = u
			}
		}
		if g == nil {
			g = &group{off: off, end: end, arms: map[string][]abi.Field{}}
			unions = append(unions, g)
		}
		g.off, g.end = min(g.off, off), max(g.end, end)
		g.order = append(g.order, name)
		g.arms[name] = fs
	}
	groups = append(groups, unions...)
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].off < groups[j].off })
	fmt.Fprintf(b, "struct softirdma_%s {\n", l.Name)
	pos, pad := 0, 0
	for _, g := range groups {
		if g.off < pos {
			return fmt.Errorf("%s: fields overlap at %d", l.Name, g.off)
		}
		if g.off > pos {
			fmt.Fprintf(b, "\t__u8 rsvd%d[%d];\n", pad, g.off-pos)
			pad++
		}
		if g.plain != nil {
			b.WriteString("\t" + cField(*g.plain) + ";\n")
			pos = g.end
			continue
		}
		// Every arm starts where the union does, padded to its first field.
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
					out = append(out, Const{Name: cName(name.Name), Value: v})
				}
			}
		}
	}
	return out, nil
}

// cName turns a Go name into upper snake case, keeping acronyms whole.
func cName(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prev := r[i-1]
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToUpper(c))
	}
	return b.String()
}
