package main

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every "kvidx GROUP ARG" that the module's documents and comments give
// names a command that runs: a group (inspect, wal) takes no argument, so a
// placeholder, a path or a flag after it names no command (recovery's
// package docs sent a reader to "kvidx inspect" with a data directory,
// which prints the group's help, for kvidx inspect summary DATA_DIR).
// cobra's completion group is left out: "SHELL" after it stands for its
// subcommands.
func TestDocsNameGroupSubcommands(t *testing.T) {
	groups := map[string]map[string]bool{}
	for _, c := range newRootCmd().Commands() {
		if !c.HasSubCommands() || c.Name() == "completion" {
			continue
		}
		subs := map[string]bool{}
		for _, s := range c.Commands() {
			subs[s.Name()] = true
		}
		groups[c.Name()] = subs
	}
	mention := regexp.MustCompile(`kvidx ([a-z]+) (\S+)`)
	// What a command's argument looks like: DATA_DIR, FILE, ./dir, /dir, --flag.
	argument := regexp.MustCompile(`^([A-Z][A-Z_]*[A-Z]\b|\.{0,2}/|--?[a-z])`)
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); ext != ".go" && ext != ".md" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range mention.FindAllStringSubmatch(string(data), -1) {
			subs, ok := groups[m[1]]
			arg := strings.Trim(m[2], "`\"'),.;:")
			if !ok || subs[arg] || arg == "--help" || arg == "-h" || !argument.MatchString(arg) {
				continue
			}
			t.Errorf("%s: %q: kvidx %s takes a subcommand (%s), not %q", path, m[0], m[1], strings.Join(slices.Sorted(maps.Keys(subs)), ", "), arg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
