package main

import (
	"errors"
	"fmt"
)

// usageError is a bad command line; it exits 1 with the message naming the
// argument.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitError carries a run's exit code (2 failed, 4 unreachable) after the
// run has printed its own report.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode maps an error from a subcommand to the process status.
func exitCode(err error) int {
	var x exitError
	if errors.As(err, &x) {
		return x.code
	}
	if err != nil {
		return 1
	}
	return 0
}
