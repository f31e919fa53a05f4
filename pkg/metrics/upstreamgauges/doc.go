// Package upstreamgauges exports each upstream's computed figures (priority
// loads, locality traffic, dropped fraction, panic state) as Prometheus
// gauges that follow the publications, off the publisher's path and with a
// bounded number of series.
package upstreamgauges
