package manifest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Documents whose aliases would expand them into gigabytes are refused
// before anything expands them, naming the file and document (TestBinary
// holds the real binary's time and memory for it); anchors used within
// reason still decode.
func TestAliasBombsRefused(t *testing.T) {
	t.Parallel()
	head := "apiVersion: poise.dev/v1alpha1\nkind: Upstream\nmetadata:\n  name: bomb\n  namespace: default\n  annotations:\n"
	wide := head + "    a: &big " + strings.Repeat("x", 1<<20) + "\n    b: [" + strings.TrimSuffix(strings.Repeat("*big, ", 3000), ", ") + "]\n"
	deep := head + "    l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	for i := 1; i < 10; i++ {
		deep += fmt.Sprintf("    l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	for name, doc := range map[string]string{"one large anchor used 3,000 times": wide, "ten levels of ten aliases": deep} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode("bomb.yaml", []byte(doc))
			var errs Errors
			if !errors.As(err, &errs) || len(errs) != 1 || errs[0].File != "bomb.yaml" || errs[0].Document != 1 ||
				!strings.Contains(errs[0].Detail, "aliases expand it beyond 64 MiB") {
				t.Fatalf("got %v, want the document refused for its expansion", err)
			}
		})
	}
	ok := head + "    a: &v some-value\n    b: *v\n  labels: &l {team: shop}\nspec: {}\n"
	if _, err := Decode("fine.yaml", []byte(ok)); err != nil && strings.Contains(err.Error(), "expand") {
		t.Fatalf("a document with a few aliases was refused: %v", err)
	}
}
