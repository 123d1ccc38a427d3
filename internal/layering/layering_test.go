// Package layering checks that the repository's packages import what they need and no more: the
// emu and wire facades are for programs outside the repository, and the PCI model links no
// simulator, wall-clock host, fault plan or packet library.
package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/softirdma/softirdma"

// goList runs go list with args from the module's root.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// The device model and the Go driver stand on the engine alone.
func TestPCIModelLinksNoSimulator(t *testing.T) {
	for _, dep := range goList(t, "-deps", "./hw", "./hw/driver") {
		for _, banned := range []string{module + "/emu/sim", module + "/emu/realtime", module + "/wire/faultplan", "github.com/google/gopacket"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("hw or hw/driver depends on %s", dep)
			}
		}
	}
}

// No package of the repository imports the emu facade, and the wire facade only for what is
// wire's own (pcap), not for the names it forwards from wire/roce.
func TestNoFacadeInside(t *testing.T) {
	for _, line := range strings.Split(strings.Join(goList(t, "-f", "{{.ImportPath}}|{{join .Imports \",\"}}", "./..."), "\n"), "\n") {
		pkg, imports, _ := strings.Cut(line, "|")
		if pkg == module+"/emu" || pkg == module+"/wire" {
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
			if imp == module+"/emu" {
				t.Errorf("%s imports the emu facade: import emu/engine, emu/sim or emu/realtime", pkg)
			}
		}
	}
}

// forwardedNames are the names package wire forwards from wire/roce: the declarations of its
// files that stand for a roce name (an alias, or a function that only calls roce's).
func forwardedNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	files, err := filepath.Glob("../../wire/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		fromRoce := func(e ast.Node) bool {
			found := false
			ast.Inspect(e, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "roce" {
						found = true
					}
				}
				return !found
			})
			return found
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						if sp.Assign.IsValid() && fromRoce(sp.Type) {
							names[sp.Name.Name] = true
						}
					case *ast.ValueSpec:
						for i, n := range sp.Names {
							if i < len(sp.Values) && fromRoce(sp.Values[i]) {
								names[n.Name] = true
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil && d.Body != nil && len(d.Body.List) == 1 && fromRoce(d.Body) {
					names[d.Name.Name] = true
				}
			}
		}
	}
	if !names["Frame"] || !names["Parser"] || !names["NewBuilder"] {
		t.Fatalf("the forwarded names were not found: %v", names)
	}
	return names
}

// Inside the repository, wire/roce's names are used as roce's: the wire facade is for programs
// outside it.
func TestNoForwardedWireNamesInside(t *testing.T) {
	forwarded := forwardedNames(t)
	fset := token.NewFileSet()
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		dir := filepath.Dir(rel)
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || dir == "wire" || dir == "emu" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		local := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"`+module+`/wire"` {
				local = "wire"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && forwarded[sel.Sel.Name] {
					t.Errorf("%s: %s.%s is wire/roce's: use roce.%s", fset.Position(sel.Pos()), local, sel.Sel.Name, sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
