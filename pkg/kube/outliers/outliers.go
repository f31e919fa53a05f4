package outliers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/conditions"
	"poise.dev/poise/pkg/kube/shares"
	"poise.dev/poise/pkg/kube/status"
	"poise.dev/poise/pkg/metrics"
	"poise.dev/poise/pkg/signals/outlier"
	"poise.dev/poise/pkg/topology"
)

// writeQPS and writeBurst bound the writes of status.outlierEjections: a
// mass ejection writes each Upstream once, spread out, never all at once.
const (
	writeQPS   = 20
	writeBurst = 40
)

// Writer decides fleet outlier detection (spec.outlierDetection)
// while this replica leads (docs/health.md): once a period it reads every
// replica's shared aggregate, merges each upstream's, decides, and writes
// the ejections in force to the Upstream's status.outlierEjections, where
// every replica, this one included, reads them into the topology. A new
// leader continues from what the previous one wrote.
type Writer struct {
	Client client.Client // reads from the informer cache
	Dir    *topology.Directory
	Shares *shares.Store
	// Period is how often it decides; Window the load reports' window.
	Period, Window time.Duration
	Log            *slog.Logger
	Metrics        *metrics.Outliers    // optional
	Events         status.EventRecorder // optional
}

// Run decides until ctx ends.
func (w *Writer) Run(ctx context.Context) error {
	d := outlier.NewDecider(w.Window)
	limiter := flowcontrol.NewTokenBucketRateLimiter(writeQPS, writeBurst)
	defer limiter.Stop()
	if err := w.restore(ctx, d); err != nil {
		return err
	}
	known := map[topology.Key]bool{}
	defer func() {
		for k := range known {
			w.forgetMetrics(k)
		}
	}()
	tick := time.NewTicker(w.Period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			w.evaluate(ctx, d, limiter, known, now)
		}
	}
}

// restore gives the decider the ejections the previous leader wrote.
func (w *Writer) restore(ctx context.Context, d *outlier.Decider) error {
	var list v1alpha1.UpstreamList
	if err := w.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("reading the Upstreams' outlier ejections: %w", err)
	}
	now := time.Now()
	for i := range list.Items {
		u := &list.Items[i]
		if u.Spec.OutlierDetection == nil || u.Status.OutlierEjections == nil {
			continue
		}
		var es []outlier.Ejection
		for _, e := range u.Status.OutlierEjections.Ejected {
			es = append(es, outlier.Ejection{Address: e.Address, Port: uint32(e.Port), Until: e.Until.Time, Count: uint32(max(e.Count, 1)), Origin: e.Origin, Generation: e.Generation})
		}
		d.Restore(topology.Key{Namespace: u.Namespace, Name: u.Name}, es, now)
	}
	return nil
}

// evaluate decides every upstream with a detection at now.
func (w *Writer) evaluate(ctx context.Context, d *outlier.Decider, limiter flowcontrol.RateLimiter, known map[topology.Key]bool, now time.Time) {
	shares, err := w.Shares.List(ctx, now, 3*w.Period, max(10*w.Window, time.Minute))
	if err != nil {
		w.Log.Warn("reading the replicas' load aggregates failed; nothing is decided until they are read", "error", err)
		return
	}
	aggs := map[string][]outlier.Aggregate{}
	for _, s := range shares {
		sh, err := outlier.DecodeShared(s.Payload)
		if err != nil {
			w.Log.Warn("a replica's load aggregate is unreadable and left out", "replica", s.Replica, "error", err)
			continue
		}
		for up, a := range sh.Upstreams {
			aggs[up] = append(aggs[up], a)
		}
	}
	snap := w.Dir.Current()
	seen := map[topology.Key]bool{}
	for _, u := range snap.Upstreams() {
		od := u.Upstream.OutlierDetection
		if od == nil {
			continue
		}
		k := u.Upstream.Key
		seen[k] = true
		label := k.String()
		if !known[k] && w.Metrics != nil {
			w.Metrics.Init(label)
		}
		known[k] = true
		merged := outlier.Merge(aggs[label]...)
		for _, v := range d.Decide(k, *od, merged, outlier.EndpointsOf(u), now) {
			w.record(k, v)
		}
		ejections := d.Ejections(k)
		if w.Metrics != nil {
			w.Metrics.Ejected.WithLabelValues(label).Set(float64(len(ejections)))
			w.Metrics.UntrustedReporters.WithLabelValues(label).Set(float64(merged.Untrusted))
		}
		if err := w.write(ctx, limiter, k, ejections); err != nil {
			w.Log.Warn("writing outlier ejections failed; retried at the next evaluation", "upstream", label, "error", err)
		}
	}
	for _, k := range d.Upstreams() {
		if !seen[k] {
			d.Forget(k)
		}
	}
	for k := range known {
		if !seen[k] {
			delete(known, k)
			w.forgetMetrics(k)
			// the detection (or the upstream) is gone: so is its status
			if err := w.write(ctx, limiter, k, nil); err != nil {
				w.Log.Warn("clearing outlier ejections failed", "upstream", k.String(), "error", err)
			}
		}
	}
}

func (w *Writer) forgetMetrics(k topology.Key) {
	if w.Metrics != nil {
		w.Metrics.Forget(k.String())
	}
}

// record logs a decision and tells it as an Event on the Upstream.
func (w *Writer) record(k topology.Key, v outlier.Verdict) {
	label := k.String()
	obj := &v1alpha1.Upstream{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Upstream"},
		ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
	v.Log(w.Log, label)
	if v.Ejected {
		if w.Metrics != nil {
			w.Metrics.Ejections.WithLabelValues(label).Inc()
		}
		if w.Events != nil {
			w.Events.Eventf(obj, nil, "Warning", conditions.ReasonOutlierEjected, "Eject", "%s", conditions.Clip(fmt.Sprintf("%s:%d ejected (%s)", v.Address, v.Port, v.Origin), status.MaxEventNote))
		}
		return
	}
	if w.Events != nil {
		w.Events.Eventf(obj, nil, "Normal", conditions.ReasonOutlierReturned, "Return", "%s:%d returned: its ejection time is up", v.Address, v.Port)
	}
}

// write patches upstream k's status.outlierEjections to the ejections in
// force when it differs (nil: none, and no detection).
func (w *Writer) write(ctx context.Context, limiter flowcontrol.RateLimiter, k topology.Key, es []outlier.Ejection) error {
	return status.PatchUpstreamStatus(ctx, w.Client, limiter, k, func(u *v1alpha1.Upstream) {
		// none while nothing is ejected: a healthy fleet writes nothing
		var want *v1alpha1.OutlierEjectionStatus
		if u.Spec.OutlierDetection != nil && len(es) > 0 {
			want = &v1alpha1.OutlierEjectionStatus{}
			for _, e := range es[:min(len(es), v1alpha1.MaxCheckedEndpointsPerUpstream)] {
				want.Ejected = append(want.Ejected, v1alpha1.EjectedEndpoint{Address: e.Address, Port: int32(e.Port), Origin: conditions.Clip(e.Origin, 256),
					Until: metav1.NewTime(e.Until.UTC().Truncate(time.Second)), Count: int32(min(e.Count, 1<<30)), Generation: conditions.Clip(e.Generation, v1alpha1.MaxGenerationLength)})
			}
		}
		u.Status.OutlierEjections = want
	})
}
