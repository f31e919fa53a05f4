package controlplane

import (
	"fmt"

	"poise.dev/poise/pkg/topology"
	"poise.dev/poise/pkg/xds/publish"
	"poise.dev/poise/pkg/xds/server"
	"poise.dev/poise/pkg/xds/translate"
	"poise.dev/poise/pkg/xds/xdsname"
)

// rejectingPublication is the publication the status writer reads: the
// publisher, and which upstreams this replica's xDS clients reject (the
// kube.ClientRejections interface), so that an Upstream whose resources
// its clients NACK is not Programmed.
type rejectingPublication struct {
	*publish.Publisher
	clients *server.Clients
}

// RejectedBy says how many of this replica's streams reject one of the
// upstream's resources (its cluster and endpoints, or a gRPC client's
// listener and route), with the reason of one of them.
func (p rejectingPublication) RejectedBy(k topology.Key) string {
	for _, name := range []string{xdsname.Cluster(k), translate.ListenerName(k)} {
		if r := p.clients.Rejected(name); r.Streams > 0 {
			return fmt.Sprintf("%d xDS stream(s) of this replica, which keep their last accepted version; resource %s: %s", r.Streams, name, r.Reason)
		}
	}
	return ""
}

func (p rejectingPublication) RejectedChanged() <-chan struct{} { return p.clients.RejectedChanged() }
