package source

import (
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The contract of a remote cluster's Secret (docs/multicluster.md): a Secret
// in Poise's namespace labelled LabelRemoteCluster with the cluster's name,
// whose data key RemoteKubeconfigKey holds a kubeconfig that reaches the
// remote apiserver with a read-only identity (get, list, watch of services,
// endpointslices and nodes).
const (
	LabelRemoteCluster  = "poise.dev/remote-cluster"
	RemoteKubeconfigKey = "kubeconfig"
	// DefaultClusterName is the home cluster's name when --cluster-name is not given.
	DefaultClusterName = "home"
	// MaxKubeconfigBytes bounds a remote cluster's kubeconfig.
	MaxKubeconfigBytes = 64 << 10
	// MaxRemoteClusters bounds the remote clusters a replica reads; a Secret
	// past it (in name order) is refused with an error naming it.
	MaxRemoteClusters = 64
)

var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidClusterName reports why a cluster name is not a DNS label of at most
// 63 characters ("" when it is).
func ValidClusterName(name string) string {
	if name == "" || len(name) > 63 || !clusterNameRE.MatchString(name) {
		return fmt.Sprintf("cluster name %q must be a DNS label (lowercase letters, digits and '-', at most 63 characters)", name)
	}
	return ""
}

// RemoteConfig reads and checks a remote cluster's Secret: its name label,
// its kubeconfig's size, and that the kubeconfig runs nothing on the control
// plane (no exec or auth-provider plugin, no credential file to read). It
// returns the cluster's name and a client configuration for the
// kubeconfig's current context. Every error names the Secret and field.
func RemoteConfig(s *corev1.Secret, home string) (string, *rest.Config, error) {
	where := fmt.Sprintf("Secret %s/%s", s.Namespace, s.Name)
	name := s.Labels[LabelRemoteCluster]
	if why := ValidClusterName(name); why != "" {
		return name, nil, fmt.Errorf("%s label %s: %s", where, LabelRemoteCluster, why)
	}
	if name == home {
		return name, nil, fmt.Errorf("%s label %s: %q is the home cluster's name (--cluster-name); a remote cluster needs another", where, LabelRemoteCluster, name)
	}
	data, ok := s.Data[RemoteKubeconfigKey]
	switch {
	case !ok || len(data) == 0:
		return name, nil, fmt.Errorf("%s data.%s: missing or empty; it must hold a kubeconfig", where, RemoteKubeconfigKey)
	case len(data) > MaxKubeconfigBytes:
		return name, nil, fmt.Errorf("%s data.%s: %d bytes, more than the %d a kubeconfig may have", where, RemoteKubeconfigKey, len(data), MaxKubeconfigBytes)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return name, nil, fmt.Errorf("%s data.%s: not a kubeconfig: %w", where, RemoteKubeconfigKey, err)
	}
	ctxName := kc.CurrentContext
	kctx, ok := kc.Contexts[ctxName]
	if ctxName == "" || !ok {
		return name, nil, fmt.Errorf("%s data.%s: current-context %q names no context", where, RemoteKubeconfigKey, ctxName)
	}
	if _, ok := kc.Clusters[kctx.Cluster]; !ok {
		return name, nil, fmt.Errorf("%s data.%s: context %q names cluster %q, which is not in the kubeconfig", where, RemoteKubeconfigKey, ctxName, kctx.Cluster)
	}
	c := kc.Clusters[kctx.Cluster]
	if c.CertificateAuthority != "" {
		return name, nil, fmt.Errorf("%s data.%s: cluster %q reads certificate-authority from a file (%s); embed it as certificate-authority-data", where, RemoteKubeconfigKey, kctx.Cluster, c.CertificateAuthority)
	}
	if u, ok := kc.AuthInfos[kctx.AuthInfo]; ok {
		switch {
		case u.Exec != nil:
			return name, nil, fmt.Errorf("%s data.%s: user %q has an exec plugin (%s); Poise runs no command a kubeconfig names: use a token or a client certificate", where, RemoteKubeconfigKey, kctx.AuthInfo, u.Exec.Command)
		case u.AuthProvider != nil:
			return name, nil, fmt.Errorf("%s data.%s: user %q has an auth-provider plugin (%s); Poise runs no plugin a kubeconfig names: use a token or a client certificate", where, RemoteKubeconfigKey, kctx.AuthInfo, u.AuthProvider.Name)
		case u.TokenFile != "" || u.ClientCertificate != "" || u.ClientKey != "":
			return name, nil, fmt.Errorf("%s data.%s: user %q reads a credential from a file; embed it (token, client-certificate-data, client-key-data)", where, RemoteKubeconfigKey, kctx.AuthInfo)
		case u.Impersonate != "" || len(u.ImpersonateGroups) > 0:
			return name, nil, fmt.Errorf("%s data.%s: user %q impersonates; give the read-only identity directly", where, RemoteKubeconfigKey, kctx.AuthInfo)
		}
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*kc, ctxName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return name, nil, fmt.Errorf("%s data.%s: %w", where, RemoteKubeconfigKey, err)
	}
	if cfg.Host == "" {
		return name, nil, fmt.Errorf("%s data.%s: cluster %q has no server", where, RemoteKubeconfigKey, kctx.Cluster)
	}
	// a CA or client certificate that does not parse is an error of the
	// Secret, said now rather than at every attempt to connect
	if _, err := rest.TransportFor(cfg); err != nil {
		return name, nil, fmt.Errorf("%s data.%s: TLS of context %q: %w", where, RemoteKubeconfigKey, ctxName, err)
	}
	return name, cfg, nil
}
