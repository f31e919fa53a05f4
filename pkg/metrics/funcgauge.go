package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// funcGaugeVec is a gauge per label value, read from a function at each
// scrape: a staleness grows between events, which a set gauge would not,
// and a count the owner already keeps needs no second copy kept in step.
type funcGaugeVec struct {
	desc *prometheus.Desc
	f    atomic.Pointer[func() map[string]float64]
	// zero are the label values reported as 0 when f does not name them
	// (or is not set), so their series exist from the start.
	zero []string
	// bare: the gauge has no label; f reports it under "".
	bare bool
}

func (g *funcGaugeVec) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *funcGaugeVec) Collect(ch chan<- prometheus.Metric) {
	var values map[string]float64
	if f := g.f.Load(); f != nil {
		values = (*f)()
	}
	for _, label := range g.zero {
		if _, ok := values[label]; !ok {
			ch <- g.metric(0, label)
		}
	}
	for label, v := range values {
		ch <- g.metric(v, label)
	}
}

func (g *funcGaugeVec) metric(v float64, label string) prometheus.Metric {
	if g.bare {
		return prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
	}
	return prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, label)
}

// funcGaugePairs is a gauge of two labels whose values a function reports at each scrape.
type funcGaugePairs struct {
	desc *prometheus.Desc
	f    atomic.Pointer[func() map[[2]string]float64]
}

func (g *funcGaugePairs) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *funcGaugePairs) Collect(ch chan<- prometheus.Metric) {
	if f := g.f.Load(); f != nil {
		for l, v := range (*f)() {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, l[0], l[1])
		}
	}
}

// funcCounter is a counter without labels read from a function at each
// scrape: a count its owner already keeps (0 while f is not set).
type funcCounter struct {
	desc *prometheus.Desc
	f    atomic.Pointer[func() uint64]
}

func (c *funcCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *funcCounter) Collect(ch chan<- prometheus.Metric) {
	var v uint64
	if f := c.f.Load(); f != nil {
		v = (*f)()
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v))
}
