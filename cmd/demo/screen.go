package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// maxEvents is how many of the last events a terminal page shows.
const maxEvents = 8

// screen is where the demo writes: lines appended one after another, or,
// on a terminal, one page redrawn in place (the introduction, the last
// events, the tables).
type screen struct {
	mu     sync.Mutex
	out    io.Writer
	tty    bool
	intro  string
	events []string
}

func newScreen(out io.Writer) *screen {
	s := &screen{out: out}
	if f, ok := out.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			s.tty = true
		}
	}
	return s
}

// setIntro writes the introduction: once, or at the top of every page.
func (s *screen) setIntro(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.intro = text
	if !s.tty {
		fmt.Fprintln(s.out, text)
	}
}

// event writes a line that happened now, with the time of day.
func (s *screen) event(format string, args ...any) {
	line := time.Now().Format("15:04:05.000") + " " + fmt.Sprintf(format, args...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tty {
		fmt.Fprintln(s.out, line)
		return
	}
	s.events = append(s.events, line)
	if len(s.events) > maxEvents {
		s.events = s.events[len(s.events)-maxEvents:]
	}
}

// page writes the tables: appended, or on a terminal as the whole page.
func (s *screen) page(tables string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tty {
		fmt.Fprint(s.out, tables)
		return
	}
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J") // home, clear
	b.WriteString(s.intro)
	b.WriteString("\n")
	for _, e := range s.events {
		b.WriteString(e + "\n")
	}
	b.WriteString("\n" + tables)
	fmt.Fprint(s.out, b.String())
}

// line writes a line as it is, also on a terminal (the last words).
func (s *screen) line(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format+"\n", args...)
}
