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

// README's layout table names every package of the module (the root as
// `.`, the internal ones too) and nothing that is not one: the root
// package, which embeds the Mooncake trace, was missing from it.
func TestREADMELayoutListsEveryPackage(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	listed := map[string]bool{}
	for line := range strings.Lines(layout) {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.Contains(cells[1], "`") {
			continue
		}
		names := strings.Split(cells[1], "`")
		for i := 1; i < len(names); i += 2 {
			listed[names[i]] = true
		}
	}
	packages := map[string]bool{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		sources, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil {
			return err
		}
		if hasNonTestSource(sources) {
			packages[filepath.ToSlash(path)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range packages {
		if !listed[p] {
			t.Errorf("package %s is not in README's layout table", p)
		}
	}
	for name := range listed {
		if strings.HasSuffix(name, "/") {
			if fi, err := os.Stat(name); err != nil || !fi.IsDir() {
				t.Errorf("README's layout table lists %s, which is not a directory", name)
			}
		} else if !packages[name] {
			t.Errorf("README's layout table lists %s, which is not a package", name)
		}
	}
}
