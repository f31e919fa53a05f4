package testkit

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// Logs is where a system under test logs, from any of its goroutines:
// slog's JSON handler writes into it (slog.NewJSONHandler(logs, nil)), and
// Records reads the lines back.
type Logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Records decodes the JSON lines logged so far whose message ("msg") is one
// of msgs, or every line without msgs, in the order they were logged. A
// line that is not JSON fails the test.
func (l *Logs) Records(t testing.TB, msgs ...string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if len(msgs) == 0 {
			out = append(out, r)
			continue
		}
		for _, m := range msgs {
			if r["msg"] == m {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
