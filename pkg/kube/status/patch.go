package status

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/topology"
)

// PatchUpstreamStatus patches the status of upstream k as set (a field of
// it) changes a copy from the cache, when it changes anything: one write
// per change, within limiter's budget, with optimistic locking, so a cache
// that is behind gets a conflict and a retry, never an overwrite.
func PatchUpstreamStatus(ctx context.Context, c client.Client, limiter flowcontrol.RateLimiter, k topology.Key, set func(*v1alpha1.Upstream)) error {
	var u v1alpha1.Upstream
	if err := c.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Name}, &u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	orig := u.DeepCopy()
	set(&u)
	if equality.Semantic.DeepEqual(orig.Status, u.Status) {
		return nil
	}
	if err := limiter.Wait(ctx); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if err := c.Status().Patch(wctx, &u, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("status of upstream %s: %w", k, err)
	}
	return nil
}
