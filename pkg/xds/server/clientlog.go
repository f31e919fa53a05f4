package server

import "time"

// Clients' connects and disconnects are logged within a budget: at most
// clientLogBurst lines a period of clientLogEvery, and at the end of a
// period whose budget ran out one line counting the others, so thousands of
// clients reconnecting at once (a replica restarted, a network healed)
// write a few dozen lines, not thousands.
const (
	clientLogBurst = 20
	clientLogEvery = nackLogEvery
)

// clientLog is the budget of connect and disconnect lines; c.mu guards it.
type clientLog struct {
	every                 time.Duration
	start                 time.Time // of the current period
	lines                 int       // written in it
	connects, disconnects int       // not written, to count at the end of the period
	timer                 *time.Timer
}

// clientLine says whether a connect (or disconnect) line may be written
// now, counting it if not; c.mu is held.
func (c *Clients) clientLine(connect bool) bool {
	l := &c.clientLog
	now := c.now()
	if l.start.IsZero() || now.Sub(l.start) >= l.every {
		l.start, l.lines = now, 0
	}
	if l.lines < clientLogBurst {
		l.lines++
		return true
	}
	if connect {
		l.connects++
	} else {
		l.disconnects++
	}
	if l.timer == nil {
		l.timer = time.AfterFunc(l.start.Add(l.every).Sub(now), c.logUnlogged)
	}
	return false
}

// logUnlogged writes the line counting the connects and disconnects the
// period's budget left out.
func (c *Clients) logUnlogged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := &c.clientLog
	l.timer = nil
	if l.connects+l.disconnects == 0 {
		return
	}
	c.log.Info("xDS client connects and disconnects not logged one by one", "connects", l.connects, "disconnects", l.disconnects,
		"period", l.every.String())
	l.connects, l.disconnects = 0, 0
}

// logConnected logs a client once its node says who it is; c.mu is held.
func (c *Clients) logConnected(cl *Client) {
	if !c.clientLine(true) {
		return
	}
	c.log.Info("xDS client connected", "node", cl.NodeID, "kind", cl.Kind, "protocol", cl.Protocol, "stream", cl.Stream,
		"audience", cl.Audience, "principal", cl.principal(), "zone", cl.Zone, "zoneFrom", cl.ZoneFrom)
}

// logDisconnected logs a client's stream ending; c.mu is held.
func (c *Clients) logDisconnected(cl *Client) {
	if !c.clientLine(false) {
		return
	}
	c.log.Info("xDS client disconnected", "node", cl.NodeID, "kind", cl.Kind, "protocol", cl.Protocol, "stream", cl.Stream,
		"principal", cl.principal(), "zone", cl.Zone, "connectedFor", c.now().Sub(cl.Connected).Round(time.Millisecond).String())
}

// principal is who the client proved to be, or "" when anonymous.
func (cl *Client) principal() string {
	if cl.Identity == nil {
		return ""
	}
	return cl.Identity.Principal
}
