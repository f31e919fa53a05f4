package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"poise.dev/poise/pkg/suggest"
)

// flagError says what is wrong with a flag in the tool's words: the flag
// meant when one was misspelt or given one dash, and what a flag's value
// must be when it was not one, instead of the parser's own message.
func flagError(cmd *cobra.Command, err error) error {
	var missing *pflag.NotExistError
	var invalid *pflag.InvalidValueError
	var needs *pflag.ValueRequiredError
	switch {
	case errors.As(err, &missing):
		return unknownFlag(cmd.Flags(), missing)
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		return fmt.Errorf("--%s %q: want %s", f.Name, invalid.GetValue(), wantFor(f, invalid.Unwrap()))
	case errors.As(err, &needs):
		f := needs.GetFlag()
		if t := f.Value.Type(); t == "string" || t == "stringSlice" || t == "stringArray" || t == "path" {
			return fmt.Errorf("--%s needs a value", f.Name)
		}
		return fmt.Errorf("--%s needs a value: %s", f.Name, wantFor(f, nil))
	}
	return err
}

// unknownFlag names the flag most likely meant: -upstream is --upstream
// given one dash, --upstrem a slip of --upstream.
func unknownFlag(fs *pflag.FlagSet, e *pflag.NotExistError) error {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	if group := e.GetSpecifiedShortnames(); group != "" {
		// "-upstream" reads as the shorthands u, p, s, ...
		name, _, _ := strings.Cut(group, "=")
		if f := fs.Lookup(name); f != nil && !f.Hidden {
			return fmt.Errorf("unknown flag -%s: a flag of more than one letter takes two dashes: --%s", name, f.Name)
		}
		if near, ok := suggest.Closest(name, names); ok && len(name) > 1 {
			return fmt.Errorf("unknown flag -%s; did you mean --%s?", name, near)
		}
		if len(name) == 1 {
			return fmt.Errorf("unknown flag -%s", name)
		}
		return fmt.Errorf("unknown flag -%c (in -%s)", e.GetSpecifiedName()[0], name)
	}
	name := e.GetSpecifiedName()
	if near, ok := suggest.Closest(name, names); ok {
		return fmt.Errorf("unknown flag --%s; did you mean --%s?", name, near)
	}
	return fmt.Errorf("unknown flag --%s", name)
}

// wantFor says what a flag of f's type takes, with the parser's reason when
// it is more than a value of the wrong form (a number out of range).
func wantFor(f *pflag.Flag, cause error) string {
	var num *strconv.NumError
	outOfRange := errors.As(cause, &num) && errors.Is(num.Err, strconv.ErrRange)
	switch t := f.Value.Type(); t {
	case "uint", "uint8", "uint16", "uint32", "uint64":
		if outOfRange {
			return fmt.Sprintf("a whole number of at most %d bits", bitsOf(t))
		}
		return "a whole number, 0 or more"
	case "int", "int8", "int16", "int32", "int64":
		if outOfRange {
			return fmt.Sprintf("a whole number of at most %d bits", bitsOf(t))
		}
		return "a whole number"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration such as 500ms, 30s or 5m"
	case "ip":
		return "an IP address"
	}
	if cause != nil {
		return cause.Error()
	}
	return "a " + f.Value.Type()
}

func bitsOf(t string) int {
	for _, n := range []int{8, 16, 32} {
		if strings.HasSuffix(t, strconv.Itoa(n)) {
			return n
		}
	}
	return 64
}

// maxHelpWidth is the widest the flags' help is wrapped to: a terminal
// wider than that still reads lines of at most 100 columns.
const maxHelpWidth = 100

// helpWidth is the width the flags' help is wrapped to: the terminal's,
// when out is one narrower than maxHelpWidth, else maxHelpWidth.
func helpWidth(out io.Writer) int {
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 20 && w < maxHelpWidth {
			return w
		}
	}
	return maxHelpWidth
}
