package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"poise.dev/poise/pkg/weights"
)

func TestAdminStateFromEndpointConditions(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name                        string
		ready, serving, terminating *bool
		want                        weights.AdminState
	}{
		{"unset means ready", nil, nil, nil, weights.Ready},
		{"ready", &yes, &yes, &no, weights.Ready},
		{"serving and terminating", &no, &yes, &yes, weights.Draining},
		{"terminating, not serving", &no, &no, &yes, weights.Unavailable},
		{"not ready, not terminating", &no, &yes, &no, weights.Unavailable},
		{"ready but terminating", &yes, &yes, &yes, weights.Draining},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AdminState(discoveryv1.EndpointConditions{Ready: tc.ready, Serving: tc.serving, Terminating: tc.terminating})
			if got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestServicePortByNameOrNumber(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 9090}, {Name: "http", Port: 80}}}}
	for _, tc := range []struct {
		ref  string
		want string
		ok   bool
	}{{"grpc", "grpc", true}, {"80", "http", true}, {"9090", "grpc", true}, {"8080", "", false}, {"admin", "", false}} {
		p, ok := ServicePort(svc, tc.ref)
		if ok != tc.ok || p.Name != tc.want {
			t.Errorf("ServicePort(%q) = %q %v, want %q %v", tc.ref, p.Name, ok, tc.want, tc.ok)
		}
	}
}

func TestImportedSetNamesCannotCollideWithObjects(t *testing.T) {
	n := ImportedSetName("checkout", "checkout-svc", "eu-west", "eu-west-1a")
	if n != "checkout:checkout-svc:eu-west:eu-west-1a" {
		t.Fatalf("name %q", n)
	}
}
