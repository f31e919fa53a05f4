package testkit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"poise.dev/poise/test/testkit"
)

func TestEventuallyAsksUntilDone(t *testing.T) {
	asked := 0
	testkit.Eventually(t, time.Second, "the third ask", func() (bool, string) {
		asked++
		return asked == 3, ""
	})
	if asked != 3 {
		t.Errorf("asked %d times, want 3", asked)
	}
}

func TestGetJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			http.Error(w, "no such report", http.StatusNotFound)
			return
		}
		w.Write([]byte(`{"revision": 7}`))
	}))
	defer srv.Close()

	var rep struct{ Revision int }
	testkit.MustGetJSON(t, srv.URL+"/ok", &rep)
	if rep.Revision != 7 {
		t.Errorf("revision %d, want 7", rep.Revision)
	}
	err := testkit.GetJSON(srv.URL+"/missing", &rep)
	if err == nil || !strings.Contains(err.Error(), "404 Not Found: no such report") {
		t.Errorf("GET of a missing report: %v, want the status and the body", err)
	}
}
