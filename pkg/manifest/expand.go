package manifest

import (
	"bytes"
	"fmt"

	yamlv3 "go.yaml.in/yaml/v3"
)

// MaxExpandedBytes bounds what one document may grow to once its YAML
// aliases are expanded. A one-megabyte anchor used three thousand times is a
// three-gigabyte document to any decoder that expands it (and YAML to JSON
// does); such a document is refused before it is expanded.
const MaxExpandedBytes = 64 << 20

// expansionProblem says why raw would expand beyond MaxExpandedBytes, or ""
// when it would not. Only documents with both an anchor and an alias are
// parsed for it; the parse keeps aliases as references, so it costs what
// the document's own bytes do.
func expansionProblem(raw []byte) string {
	if bytes.IndexByte(raw, '&') < 0 || bytes.IndexByte(raw, '*') < 0 {
		return ""
	}
	var root yamlv3.Node
	if yamlv3.Unmarshal(raw, &root) != nil {
		return "" // the decoder reports what is wrong with it
	}
	sizes := map[*yamlv3.Node]int{}
	var size func(n *yamlv3.Node, depth int) int
	size = func(n *yamlv3.Node, depth int) int {
		if n == nil {
			return 0
		}
		if s, ok := sizes[n]; ok {
			return s
		}
		if depth > 10000 {
			return MaxExpandedBytes + 1 // an alias cycle, or nesting no manifest needs
		}
		s := len(n.Value) + 4 // the scalar and some punctuation
		switch n.Kind {
		case yamlv3.AliasNode:
			s = size(n.Alias, depth+1)
		case yamlv3.DocumentNode, yamlv3.SequenceNode, yamlv3.MappingNode:
			for _, c := range n.Content {
				if s += size(c, depth+1); s > MaxExpandedBytes {
					s = MaxExpandedBytes + 1 // saturate: a bomb's sizes overflow
					break
				}
			}
		}
		sizes[n] = s
		return s
	}
	if s := size(&root, 0); s > MaxExpandedBytes {
		return fmt.Sprintf("its YAML aliases expand it beyond %d MiB (the most a document may expand to); refused before expanding it", MaxExpandedBytes>>20)
	}
	return ""
}
