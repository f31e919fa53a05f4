package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeClient is the Kubernetes client configuration a replica uses, where it
// came from, and the namespace of the kubeconfig context (empty in a pod).
type kubeClient struct {
	config    *rest.Config
	from      string
	namespace string
}

// loadKubeClient finds the client configuration as kubectl and controllers
// do: the --kubeconfig flag, else $KUBECONFIG, else the pod's service
// account, else ~/.kube/config.
func loadKubeClient(explicit string) (kubeClient, error) {
	return findKubeClient(explicit, os.Getenv(clientcmd.RecommendedConfigPathEnvVar), rest.InClusterConfig, clientcmd.RecommendedHomeFile)
}

// findKubeClient is loadKubeClient with what it reads from the process
// given: $KUBECONFIG, the in-cluster configuration, the home kubeconfig path.
func findKubeClient(explicit, env string, inCluster func() (*rest.Config, error), home string) (kubeClient, error) {
	fromFile := func(rules *clientcmd.ClientConfigLoadingRules, from string) (kubeClient, error) {
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
		cfg, err := cc.ClientConfig()
		if clientcmd.IsEmptyConfig(err) {
			// client-go's own words send the user to KUBERNETES_MASTER
			return kubeClient{}, fmt.Errorf("%s: no cluster, user or current context in it", from)
		}
		if err != nil {
			return kubeClient{}, fmt.Errorf("kubeconfig from %s: %w", from, err)
		}
		ns, _, err := cc.Namespace()
		if err != nil {
			return kubeClient{}, fmt.Errorf("kubeconfig from %s: %w", from, err)
		}
		return kubeClient{config: cfg, from: from, namespace: ns}, nil
	}
	if explicit != "" {
		return fromFile(&clientcmd.ClientConfigLoadingRules{ExplicitPath: explicit}, "--kubeconfig "+explicit)
	}
	if env != "" {
		return fromFile(&clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(env)}, "$KUBECONFIG")
	}
	cfg, podErr := inCluster()
	if podErr == nil {
		return kubeClient{config: cfg, from: "the pod's service account"}, nil
	}
	if _, err := os.Stat(home); err == nil {
		return fromFile(&clientcmd.ClientConfigLoadingRules{ExplicitPath: home}, home)
	}
	return kubeClient{}, errors.New("no Kubernetes client configuration: pass --kubeconfig, set $KUBECONFIG, run in a pod with a service account, or create " +
		home + " (in a pod: " + podErr.Error() + ")")
}

// KubeClientConfig finds the Kubernetes client configuration as `serve
// --source=kubernetes` does (flag, $KUBECONFIG, the pod's service account,
// ~/.kube/config), for commands that read a cluster once: the REST
// configuration, where it came from, and the namespace of its context.
func KubeClientConfig(explicit string) (cfg *rest.Config, from, contextNamespace string, err error) {
	kc, err := loadKubeClient(explicit)
	return kc.config, kc.from, kc.namespace, err
}
