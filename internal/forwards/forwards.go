// Package forwards checks that a package re-exporting another (type aliases, constants, variables
// and forwarding functions under the same names, as emu does for emu/engine) forwards every
// exported name, so a program written against the re-exporting package sees all of them.
package forwards

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Exported returns the exported top-level names (types, constants, variables and functions, not
// methods) declared in the non-test Go files of dir.
func Exported(dir string) ([]string, error) {
	fs := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					seen[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							seen[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								seen[id.Name] = true
							}
						}
					}
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// Missing returns the exported names of each source directory that dir does not declare.
func Missing(dir string, sources ...string) ([]string, error) {
	have, err := Exported(dir)
	if err != nil {
		return nil, err
	}
	in := map[string]bool{}
	for _, n := range have {
		in[n] = true
	}
	var out []string
	for _, src := range sources {
		names, err := Exported(src)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if !in[n] {
				out = append(out, filepath.Base(src)+"."+n)
			}
		}
	}
	return out, nil
}
