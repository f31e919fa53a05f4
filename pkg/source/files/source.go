package files

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"poise.dev/poise/pkg/manifest"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/topology"
)

const sourceName = "files"

// Source loads and watches manifest files.
type Source struct {
	Paths    []string
	Dir      *topology.Directory
	Debounce time.Duration // coalesces bursts of file events; 0 means 100ms
	Log      *slog.Logger
	Metrics  *metrics.Metrics

	mu      sync.Mutex
	applied map[string]manifest.Object // what the directory holds from us, by "Kind ns/name"
	warned  map[string]bool            // spatial problems already logged
}

// Load reads every manifest and applies them as one batch, deleting objects
// that are no longer in any file. On any error nothing is applied.
func (s *Source) Load() (*topology.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set, err := manifest.Load(s.Paths...)
	if err != nil {
		s.count("rejected")
		return nil, err
	}
	seen := make(map[string]manifest.Object, len(set.Objects))
	for _, o := range set.Objects {
		seen[o.String()] = o
	}
	deleteGone(&set.Batch, s.applied, seen)
	snap, err := s.Dir.Apply(set.Batch)
	if err != nil {
		s.count("rejected")
		return nil, set.Locate(err)
	}
	s.applied = seen
	s.warnSpatial(snap, set)
	s.count("applied")
	if s.Metrics != nil {
		s.Metrics.Revision.Set(float64(snap.Revision))
	}
	return snap, nil
}

// deleteGone adds to b the deletion of every object applied before that is in no
// file now.
func deleteGone(b *topology.Batch, applied, seen map[string]manifest.Object) {
	for id, o := range applied {
		if _, ok := seen[id]; ok {
			continue
		}
		switch o.Kind {
		case topology.KindUpstream:
			b.DeleteUpstream(o.Key)
		case topology.KindLocality:
			b.DeleteLocality(o.Key)
		case topology.KindEndpointSet:
			b.DeleteEndpointSet(o.Key)
		case topology.KindSpatialDomain:
			b.DeleteSpatialDomain(o.Key)
		case topology.KindPartition:
			b.DeletePartition(o.Key)
		}
	}
}

// warnSpatial logs each spatial problem once, with where its object is defined:
// manifest files have no status to carry it, and it never rejects a change.
func (s *Source) warnSpatial(snap *topology.Snapshot, set *manifest.Set) {
	now := map[string]bool{}
	for _, p := range snap.SpatialProblems() {
		key := p.String()
		now[key] = true
		if !s.warned[key] && s.Log != nil {
			s.Log.Warn("spatial routing problem; the rest keeps serving", "object", p.Object.String(), "at", set.Where(p.Object),
				"field", p.Field, "reason", p.Reason, "problem", p.Message)
		}
	}
	s.warned = now
}

func (s *Source) count(result string) {
	if s.Metrics != nil {
		s.Metrics.SourceBatches.WithLabelValues(sourceName, result).Inc()
	}
}

// Run watches the paths and reloads after each burst of changes until ctx
// is done. A refused change is logged and counted; the directory keeps its
// last good state.
func (s *Source) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch manifests: %w", err)
	}
	defer w.Close()
	for _, p := range s.Paths {
		if err := s.watch(w, p); err != nil {
			return err
		}
	}
	debounce := s.Debounce
	if debounce <= 0 {
		debounce = 100 * time.Millisecond
	}
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			if timer == nil {
				timer = time.After(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("manifest watch error", "error", err)
		case <-timer:
			timer = nil
			start := time.Now()
			snap, err := s.Load()
			if err != nil {
				log.Error("manifest change refused; the last good topology keeps serving", "reason", err)
				continue
			}
			log.Info("manifest change applied", "revision", snap.Revision, "took", time.Since(start))
		}
	}
}

// watch adds a directory, or a file's directory (so an editor that
// replaces the file by renaming keeps being seen). Like loading, it does not
// descend into subdirectories.
func (s *Source) watch(w *fsnotify.Watcher, p string) error {
	info, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("watch manifests: %w", err)
	}
	if !info.IsDir() {
		p = filepath.Dir(p)
	}
	if err := w.Add(p); err != nil {
		return fmt.Errorf("watch %s: %w", p, err)
	}
	return nil
}
