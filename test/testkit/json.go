package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// GetJSON decodes the body of GET url into v. A status other than 200 is an
// error that quotes the body, so a poll's last word says what the server
// answered.
func GetJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// MustGetJSON is GetJSON failing the test on an error.
func MustGetJSON(t testing.TB, url string, v any) {
	t.Helper()
	if err := GetJSON(url, v); err != nil {
		t.Fatal(err)
	}
}
