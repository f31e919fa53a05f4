package files

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/topology"
)

// logSkipped logs the documents of other kinds a file holds, once for
// what they are: a save that leaves them as they were (an edit of a weight
// in a file that starts with its Namespace) is not logged again. While
// Load reads the files they are summed up in its one line instead.
func (s *Source) logSkipped(f *file, others manifest.Others) {
	text := ""
	if others.Total() > 0 {
		text = others.String()
	}
	if text == f.skipped {
		return
	}
	f.skipped = text
	if text != "" && !s.loading && s.Log != nil {
		// kubectl applies them from the same files; they are not ours
		s.Log.Info("manifest objects of other kinds skipped", "file", f.name, "skipped", text)
	}
}

// maxNotRead bounds the paths the start-up line names as not read.
const maxNotRead = 10

// logLoaded logs, once Load has applied the files, what was loaded: the
// files read, the objects of each kind, the endpoints the upstreams
// resolved, the objects whose upstream is missing, what was skipped, and
// the entries of the directories that are not read, with why.
func (s *Source) logLoaded(snap *topology.Snapshot) {
	if s.Log == nil {
		return
	}
	kinds := map[string]int{}
	for ref := range s.owners {
		kinds[ref.Kind]++
	}
	endpoints := 0
	for _, u := range snap.Upstreams() {
		endpoints += len(u.Endpoints)
	}
	others := manifest.Others{}
	withOthers := 0
	for _, f := range s.files {
		if f.applied == nil || f.applied.Others.Total() == 0 {
			continue
		}
		withOthers++
		for k, n := range f.applied.Others {
			others[k] += n
		}
	}
	skipped := "none"
	if withOthers > 0 {
		files := "files"
		if withOthers == 1 {
			files = "file"
		}
		skipped = fmt.Sprintf("%s in %d %s", others.String(), withOthers, files)
	}
	s.Log.Info("manifests loaded", "revision", snap.Revision, "files", len(s.files), "upstreams", kinds[topology.KindUpstream],
		"localities", kinds[topology.KindLocality], "endpointSets", kinds[topology.KindEndpointSet], "endpoints", endpoints,
		"spatialDomains", kinds[topology.KindSpatialDomain], "partitions", kinds[topology.KindPartition],
		"orphans", len(snap.Orphans()), "skipped", skipped, "notRead", s.notRead())
}

// notRead names the entries of the directory paths that are not read, and
// why: subdirectories, and files that are not manifests by their name.
func (s *Source) notRead() string {
	var out []string
	n := 0
	for _, r := range s.roots {
		if !r.dir {
			continue
		}
		entries, err := os.ReadDir(r.path)
		if err != nil {
			continue // a directory that cannot be listed refuses the load
		}
		for _, d := range entries {
			why := ""
			switch {
			case d.IsDir():
				why = "a directory: subdirectories are not read"
			case !manifest.IsManifest(d.Name()):
				why = "not .yaml, .yml or .json"
			default:
				continue
			}
			if n++; len(out) < maxNotRead {
				out = append(out, fmt.Sprintf("%s (%s)", filepath.Join(r.path, d.Name()), why))
			}
		}
	}
	if n == 0 {
		return "none"
	}
	if n > len(out) {
		out = append(out, fmt.Sprintf("and %d more", n-len(out)))
	}
	return strings.Join(out, ", ")
}
