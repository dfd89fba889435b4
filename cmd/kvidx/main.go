package main

import (
	"errors"
	"fmt"
	"os"
)

// exitError ends the command with a given exit status. Its message, if
// any, is printed like any other error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func main() {
	root, finish := newRootCmdWithFinish()
	err := root.Execute()
	finish()
	if err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
			if ee.err == nil {
				os.Exit(code)
			}
		}
		fmt.Fprintln(os.Stderr, "kvidx:", err)
		os.Exit(code)
	}
}
