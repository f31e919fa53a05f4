package crdschema

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1client "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// The plane reads its own CRDs and no other: each by name (a list and a
// watch with the field selector metadata.name, which RBAC's resourceNames
// authorizes), so a cluster's other CRDs, however many and large, are
// never listed.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=endpointsets.poise.dev;localities.poise.dev;partitions.poise.dev;spatialdomains.poise.dev;upstreams.poise.dev,verbs=get;list;watch

// retry is the backoff of a list or watch of one CRD that failed; a watch
// that ends by itself is followed at once by a list.
var retry = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.25, Cap: 30 * time.Second, Steps: 1 << 30}

// Watcher follows the cluster's copy of each CRD the binary knows and keeps
// its Status against the binary's. It is safe for concurrent use.
type Watcher struct {
	// SchemaChanged, when set before Run, is called with the kind of a CRD
	// whose spec changed in the cluster after it was first read (a new
	// generation, or the CRD deleted or made again), outside any lock.
	SchemaChanged func(kind string)

	crds   apiextensionsv1client.CustomResourceDefinitionInterface
	binary []*apiextensionsv1.CustomResourceDefinition
	log    *slog.Logger
	now    func() time.Time

	mu      sync.Mutex
	status  map[string]Status
	spec    map[string]string // the installed CRD's uid/generation, once read
	failing map[string]string // the last error logged per CRD, while it fails
	checked chan struct{}     // closed once every CRD has a status
	changed chan struct{}     // one pending signal: a status changed
}

// NewWatcher returns a Watcher of binary's CRDs through crds, logging to
// log (nil: nowhere). Run starts it.
func NewWatcher(crds apiextensionsv1client.CustomResourceDefinitionInterface, binary []*apiextensionsv1.CustomResourceDefinition, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{crds: crds, binary: binary, log: log, now: time.Now, status: map[string]Status{}, spec: map[string]string{}, failing: map[string]string{},
		checked: make(chan struct{}), changed: make(chan struct{}, 1)}
}

// Run lists and watches each CRD until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, crd := range w.binary {
		wg.Go(func() { w.follow(ctx, crd) })
	}
	wg.Wait()
	return nil
}

// Checked is closed once every CRD has been read, or has failed to be, once.
func (w *Watcher) Checked() <-chan struct{} { return w.checked }

// Changed receives after a CRD's status changes; changes that come before
// it is received are one signal.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

// Statuses are the CRDs' statuses, by name; a CRD not read yet is Unknown.
func (w *Watcher) Statuses() []Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Status, 0, len(w.binary))
	for _, crd := range w.binary {
		s, ok := w.status[crd.Name]
		if !ok {
			s = Status{Name: crd.Name, State: Unknown, BinaryVersion: crd.Annotations[Annotation], Error: "not read yet"}
		}
		out = append(out, s)
	}
	return out
}

// Warnings are the /readyz warnings: one per CRD that is outdated, not
// installed or cannot be read.
func (w *Watcher) Warnings() []string {
	var out []string
	for _, s := range w.Statuses() {
		if line := s.Warning(); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// Outdated is, by CRD name, 1 while the cluster's CRD prunes fields the
// binary knows or is not installed, else 0 (poise_crd_schema_outdated).
func (w *Watcher) Outdated() map[string]float64 {
	out := map[string]float64{}
	for _, s := range w.Statuses() {
		out[s.Name] = 0
		if s.State.Bad() {
			out[s.Name] = 1
		}
	}
	return out
}

// PrunedFields is, by CRD name, how many fields the binary knows that the
// cluster's CRD prunes (poise_crd_pruned_fields).
func (w *Watcher) PrunedFields() map[string]float64 {
	out := map[string]float64{}
	for _, s := range w.Statuses() {
		out[s.Name] = float64(len(s.PrunedFields) + s.PrunedMore)
	}
	return out
}

// follow lists one CRD by name, watches it from there, and lists again
// when the watch ends; a failure is retried with backoff.
func (w *Watcher) follow(ctx context.Context, binary *apiextensionsv1.CustomResourceDefinition) {
	backoff := retry
	selector := fields.OneTermEqualSelector("metadata.name", binary.Name).String()
	for ctx.Err() == nil {
		err := w.listAndWatch(ctx, binary, selector)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = retry
			continue
		}
		w.failed(binary, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff.Step()):
		}
	}
}

func (w *Watcher) listAndWatch(ctx context.Context, binary *apiextensionsv1.CustomResourceDefinition, selector string) error {
	list, err := w.crds.List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return err
	}
	var installed *apiextensionsv1.CustomResourceDefinition
	for i := range list.Items {
		if list.Items[i].Name == binary.Name {
			installed = &list.Items[i]
		}
	}
	w.observe(binary, installed)
	// a watch ends by itself after 5 to 10 minutes, as a reflector's does
	timeout := int64(300 + rand.IntN(300))
	wi, err := w.crds.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: list.ResourceVersion,
		AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		return err
	}
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if crd, ok := ev.Object.(*apiextensionsv1.CustomResourceDefinition); ok && crd.Name == binary.Name {
					w.observe(binary, crd)
				}
			case watch.Deleted:
				w.observe(binary, nil)
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return nil // list again
				}
				return err
			}
		}
	}
}

// observe records what the cluster holds under a CRD's name, and logs and
// signals a change.
func (w *Watcher) observe(binary *apiextensionsv1.CustomResourceDefinition, installed *apiextensionsv1.CustomResourceDefinition) {
	s := Check(binary, installed)
	spec := "none"
	if installed != nil {
		spec = fmt.Sprintf("%s/%d", installed.UID, installed.Generation)
	}
	w.mu.Lock()
	was, read := w.spec[s.Name]
	w.spec[s.Name] = spec
	if read && was != spec && w.SchemaChanged != nil {
		defer w.SchemaChanged(binary.Spec.Names.Kind)
	}
	prev, seen := w.status[s.Name]
	if w.failing[s.Name] != "" {
		w.log.Info("CRD read again", "crd", s.Name)
		delete(w.failing, s.Name)
	}
	if seen && prev.same(s) {
		w.mu.Unlock()
		return
	}
	s.Since = w.now()
	w.status[s.Name] = s
	first := w.markChecked()
	w.mu.Unlock()
	w.logStatus(s, seen && prev.State != Unknown)
	if first {
		w.logChecked()
	}
	w.signal()
}

// failed records a list or watch that failed: a CRD never read is Unknown
// (a readiness warning says why); one read before keeps its status. Each
// distinct error is logged once.
func (w *Watcher) failed(binary *apiextensionsv1.CustomResourceDefinition, err error) {
	msg := err.Error()
	w.mu.Lock()
	logIt := w.failing[binary.Name] != msg
	w.failing[binary.Name] = msg
	prev, seen := w.status[binary.Name]
	changed, first := false, false
	if !seen || prev.State == Unknown {
		s := Status{Name: binary.Name, State: Unknown, BinaryVersion: binary.Annotations[Annotation], Error: msg}
		if !seen || !prev.same(s) {
			s.Since = w.now()
			w.status[binary.Name] = s
			changed = true
			first = w.markChecked()
		}
	}
	w.mu.Unlock()
	if logIt {
		w.log.Warn("cannot read CRD: its schema is checked again once it can be", "crd", binary.Name, "error", msg)
	}
	if first {
		w.logChecked()
	}
	if changed {
		w.signal()
	}
}

// markChecked closes checked once every CRD has a status, and reports
// whether this call did. Called with mu held.
func (w *Watcher) markChecked() bool {
	if len(w.status) < len(w.binary) {
		return false
	}
	select {
	case <-w.checked:
		return false
	default:
		close(w.checked)
		return true
	}
}

func (w *Watcher) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// logStatus logs a CRD's new status: a warning for one that prunes fields
// or is missing, information for the others (a CRD found current at start
// at debug level).
func (w *Watcher) logStatus(s Status, after bool) {
	attrs := []any{"crd", s.Name, "installedVersion", s.installedName(), "binaryVersion", s.BinaryVersion}
	switch s.State {
	case Outdated:
		w.log.Warn("CRD schema older than this binary's: the apiserver prunes the fields it lacks from every object written, and this replica serves without them; upgrade the CRDs",
			append(attrs, "prunedFields", Fields(s.PrunedFields, s.PrunedMore))...)
	case NotInstalled:
		w.log.Warn("CRD not installed: no object of its kind can be read; install the CRDs", "crd", s.Name, "binaryVersion", s.BinaryVersion)
	case Newer:
		w.log.Info("CRD schema newer than this binary's: the fields it does not know are kept in the cluster and ignored here",
			append(attrs, "unknownFields", Fields(s.UnknownFields, s.UnknownMore))...)
	case Compatible:
		w.log.Info("CRD schema differs from this binary's in validation, defaults or descriptions only: no field is pruned", attrs...)
	case Current:
		if after {
			w.log.Info("CRD schema matches this binary's", attrs...)
		} else {
			w.log.Debug("CRD schema matches this binary's", attrs...)
		}
	}
}

// logChecked logs, once, the state of every CRD after the first check.
func (w *Watcher) logChecked() {
	var states []string
	for _, s := range w.Statuses() {
		states = append(states, fmt.Sprintf("%s %s", s.Name, s.State))
	}
	w.log.Info("CRD schemas checked against this binary's", "states", strings.Join(states, ", "))
}
