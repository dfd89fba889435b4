package kvidx

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The foundation asks for a doc.go in every package, so that a package's
// documentation is found in one place rather than atop whichever file
// happens to declare it.
func TestEveryPackageHasDocGoWithItsComment(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		// The go tool ignores these directories, so they hold no package.
		if name := d.Name(); path != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		sources, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil {
			return err
		}
		var commented []string
		for _, f := range sources {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				return err
			}
			if file.Doc != nil {
				commented = append(commented, filepath.Base(f))
			}
		}
		if !hasNonTestSource(sources) {
			return nil
		}
		if _, err := os.Stat(filepath.Join(path, "doc.go")); err != nil {
			t.Errorf("package %s: no doc.go (package comment in %v)", path, commented)
			return nil
		}
		if len(commented) != 1 || commented[0] != "doc.go" {
			t.Errorf("package %s: package comment in %v, want in doc.go alone", path, commented)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func hasNonTestSource(files []string) bool {
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			return true
		}
	}
	return false
}
