package emu_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestAliasesSayWhereTheirMethodsAre: go doc shows an alias as its one line, without the methods
// of the type it names, so every type alias of emu has a comment that names that type and the
// go doc command that shows it.
func TestAliasesSayWhereTheirMethodsAre(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	aliases := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				if !ts.Assign.IsValid() {
					continue
				}
				aliases++
				sel, ok := ts.Type.(*ast.SelectorExpr)
				if !ok {
					t.Errorf("%s: alias %s names no other package's type", fset.Position(ts.Pos()), ts.Name)
					continue
				}
				pkg := sel.X.(*ast.Ident).Name
				target := pkg + "." + sel.Sel.Name
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				text := doc.Text()
				// The go doc command names the type itself: the target, or where the target is
				// an alias too (sim.FaultAction = faultplan.Action), the type that one names.
				cmd := regexp.MustCompile(`go doc github\.com/softirdma/softirdma/[a-z/]+\.[A-Z]\w*`)
				switch {
				case doc == nil:
					t.Errorf("%s: alias %s has no comment", fset.Position(ts.Pos()), ts.Name)
				case !strings.HasPrefix(text, ts.Name.Name+" "):
					t.Errorf("%s: alias %s's comment does not start with its name: %q", fset.Position(ts.Pos()), ts.Name, text)
				case !strings.Contains(text, target) || !cmd.MatchString(strings.Join(strings.Fields(text), " ")):
					t.Errorf("%s: alias %s's comment does not name %s and the go doc command for it: %q", fset.Position(ts.Pos()), ts.Name, target, text)
				}
			}
		}
	}
	if aliases < 50 {
		t.Fatalf("%d aliases found; is this emu's directory?", aliases)
	}
}
