package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Heartbeat asks the apiserver a cheap question every Every, on the
// replica's own connections, and reports to Health whether it answered
// within Timeout. A watch on a link that drops packets silently (a network
// partition, a node cut off) neither ends nor errs: the replica would serve
// a topology it no longer follows and say nothing for as long as TCP and
// HTTP/2's own health checks take (30 s and more). When the apiserver does
// not answer, the heartbeat says the source is stale at once (the
// "apiserver" entry of the watch health, its /readyz line and
// poise_kube_source_stale_seconds) and CloseAll ends every connection the
// replica's clients hold, so that their watches fail and are retried (and
// the Lease is no longer renewed on a link that carries nothing); once the
// link heals the retried watches resume from the last resource version
// seen and deliver what was missed.
type Heartbeat struct {
	Health *WatchHealth
	// Client reaches the apiserver at URL (its /version) with the
	// replica's transport.
	Client *http.Client
	URL    string
	// Every and Timeout: how often to ask and how long an answer may take.
	Every, Timeout time.Duration
	// CloseAll ends every connection the replica's clients hold.
	CloseAll func()
	// Asked, when set, is told each question's outcome once Health has it.
	Asked func(error)
}

// HeartbeatKind is the watch-health entry the heartbeat reports under.
const HeartbeatKind = "apiserver"

// DefaultHeartbeat is how often a replica asks, and
// DefaultHeartbeatTimeout how long it waits: a silent partition is seen
// within 7 s, and an apiserver slow to answer under load is not taken for
// one.
const (
	DefaultHeartbeat        = 2 * time.Second
	DefaultHeartbeatTimeout = 5 * time.Second
)

// NeedLeaderElection: every replica serves, and every replica must know
// whether it still follows the cluster.
func (b *Heartbeat) NeedLeaderElection() bool { return false }

// Start asks until ctx ends.
func (b *Heartbeat) Start(ctx context.Context) error {
	t := time.NewTicker(b.Every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := b.ask(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			b.Health.broken(HeartbeatKind, err)
			if !failing && b.CloseAll != nil {
				// once per outage: the connections dialled meanwhile fail
				// on their own, and closing them again would only delay
				// the first one that works
				b.CloseAll()
			}
			failing = true
		default:
			b.Health.working(HeartbeatKind)
			failing = false
		}
		if b.Asked != nil {
			b.Asked(err)
		}
	}
}

// maxHeartbeatBody bounds what an answer to /version is read of.
const maxHeartbeatBody = 64 << 10

func (b *Heartbeat) ask(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL, nil)
	if err != nil {
		return err
	}
	resp, err := b.Client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the apiserver did not answer within %v", b.Timeout)
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHeartbeatBody))
	if resp.StatusCode >= 500 {
		return fmt.Errorf("the apiserver answered %s", resp.Status)
	}
	return nil // any answer below 500, a refusal included, means it is reached
}
