package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The apiserver applies the kubebuilder:default markers. Objects read without an
// apiserver (manifest files, unit tests) get the same defaults from these methods.
// Default fills only unset fields and never changes a set one.

// Default fills the unset fields of the Upstream's spec with their defaults.
func (u *Upstream) Default() { u.Spec.Default() }

// Default fills the unset fields of the spec with their defaults.
func (s *UpstreamSpec) Default() {
	if s.OverprovisioningFactor == nil {
		s.OverprovisioningFactor = new(DefaultOverprovisioningFactor)
	}
	if s.PanicThreshold == nil {
		s.PanicThreshold = new(DefaultPanicThreshold)
	}
	if s.PanicMode == "" {
		s.PanicMode = DefaultPanicMode
	}
	if s.DrainingCapacity == "" {
		s.DrainingCapacity = DefaultDrainingCapacity
	}
	if s.HealthAdjustment == "" {
		s.HealthAdjustment = DefaultHealthAdjustment
	}
	if s.LoadBalancing == "" {
		s.LoadBalancing = DefaultLoadBalancing
	}
	if s.ConnectTimeout == nil {
		s.ConnectTimeout = &metav1.Duration{Duration: DefaultConnectTimeout}
	}
	if s.Protocol == "" {
		s.Protocol = DefaultProtocol
	}
	if s.HealthCheck != nil {
		s.HealthCheck.Default()
	}
	if s.LoadReporting != nil && s.LoadReporting.Interval == nil {
		s.LoadReporting.Interval = &metav1.Duration{Duration: DefaultLoadReportingInterval}
	}
	if s.OutlierDetection != nil {
		s.OutlierDetection.Default()
	}
	if s.Retries != nil {
		s.Retries.Default()
	}
}

// Default fills the unset fields of the outlier detection with their defaults.
func (o *OutlierDetection) Default() {
	if o.ErrorPercent == nil {
		o.ErrorPercent = new(DefaultOutlierErrorPercent)
	}
	if o.MinRequestVolume == nil {
		o.MinRequestVolume = new(DefaultOutlierMinRequestVolume)
	}
	if o.MinReporters == nil {
		o.MinReporters = new(DefaultOutlierMinReporters)
	}
	if o.BaseEjectionTime == nil {
		o.BaseEjectionTime = &metav1.Duration{Duration: DefaultOutlierBaseEjectionTime}
	}
	if o.MaxEjectionTime == nil {
		o.MaxEjectionTime = &metav1.Duration{Duration: DefaultOutlierMaxEjectionTime}
	}
	if o.MaxEjectionPercent == nil {
		o.MaxEjectionPercent = new(DefaultOutlierMaxEjectionPercent)
	}
}

// Default fills the unset fields of the health check with their defaults.
func (h *HealthCheck) Default() {
	if h.Interval == nil {
		h.Interval = &metav1.Duration{Duration: DefaultHealthCheckInterval}
	}
	if h.Timeout == nil {
		h.Timeout = &metav1.Duration{Duration: DefaultHealthCheckTimeout}
	}
	if h.HealthyThreshold == nil {
		h.HealthyThreshold = new(DefaultHealthyThreshold)
	}
	if h.UnhealthyThreshold == nil {
		h.UnhealthyThreshold = new(DefaultUnhealthyThreshold)
	}
	if h.JitterPercent == nil {
		h.JitterPercent = new(DefaultHealthCheckJitterPercent)
	}
	if h.HTTP != nil && len(h.HTTP.ExpectedStatuses) == 0 {
		h.HTTP.ExpectedStatuses = []StatusRange{{Start: DefaultExpectedStatus, End: DefaultExpectedStatus}}
	}
}

// Default fills the unset fields of the Locality's spec with their defaults.
func (l *Locality) Default() { l.Spec.Default() }

// Default fills the unset fields of the spec with their defaults.
func (s *LocalitySpec) Default() {
	if s.Priority == nil {
		s.Priority = new(DefaultLocalityPriority)
	}
	if s.Weight == nil {
		s.Weight = new(DefaultLocalityWeight)
	}
}

// Default fills the unset fields of the EndpointSet's spec and status with their
// defaults. spec.priority has no default: when absent it comes from a Locality.
func (e *EndpointSet) Default() {
	for i := range e.Spec.Endpoints {
		e.Spec.Endpoints[i].Default()
	}
	for i := range e.Status.Health {
		e.Status.Health[i].Default()
	}
}

// Default fills the unset fields of the endpoint with their defaults.
func (ep *Endpoint) Default() {
	if ep.Weight == nil {
		ep.Weight = new(DefaultEndpointWeight)
	}
	if ep.AdminState == "" {
		ep.AdminState = DefaultAdminState
	}
}

// Default fills the unset fields of the health entry with their defaults.
func (h *EndpointHealth) Default() {
	if h.Probe == "" {
		h.Probe = DefaultProbeState
	}
	if h.Circuit == "" {
		h.Circuit = DefaultCircuitState
	}
}

// Default fills the unset fields of the SpatialDomain's spec with their defaults.
// localityCapPercent has no default: absent means no cap.
func (d *SpatialDomain) Default() { d.Spec.Default() }

// Default fills the unset fields of the spec with their defaults.
func (s *SpatialDomainSpec) Default() {
	if s.GridDegrees == nil {
		s.GridDegrees = new(DefaultGridDegrees)
	}
	if s.MaxCells == nil {
		s.MaxCells = new(DefaultMaxCells)
	}
	if s.LoadReporting != nil && s.LoadReporting.Interval == nil {
		s.LoadReporting.Interval = &metav1.Duration{Duration: DefaultLoadReportingInterval}
	}
}

// Default does nothing: every field of a Partition's spec is required. It is here so
// every kind of the package can be defaulted alike.
func (p *Partition) Default() {}
