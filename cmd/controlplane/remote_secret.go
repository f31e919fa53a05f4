package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The contract with the multi-cluster import (docs/multicluster.md): a
// Secret in Poise's namespace, labelled remoteClusterLabel: NAME, whose
// kubeconfigKey holds a kubeconfig with an embedded bearer token.
const (
	remoteClusterLabel = "poise.dev/remote-cluster"
	kubeconfigKey      = "kubeconfig"
	// remoteSecretPrefix + NAME is the Secret's name in the home cluster.
	remoteSecretPrefix = "poise-remote-"
	// tokenSecretSuffix: the service-account-token Secret in the remote
	// cluster is the ServiceAccount's name + this.
	tokenSecretSuffix = "-token"
	// maxServerURL bounds --server.
	maxServerURL = 2048
	// maxRemoteTimeout bounds --timeout.
	maxRemoteTimeout = 10 * time.Minute
)

// remoteReaderRules are everything the import reads in a remote cluster,
// cluster-wide, and nothing else.
var remoteReaderRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
}

type remoteSecretOptions struct {
	kubeconfig, context, name, namespace, serviceAccount, server string
	rbacOnly                                                     bool
	timeout                                                      time.Duration
}

func newCreateRemoteSecretCmd(stdout, stderr io.Writer) *cobra.Command {
	var o remoteSecretOptions
	c := &cobra.Command{
		Use:   "create-remote-secret --context CTX --name NAME",
		Short: "Print the Secret that gives Poise read access to a remote cluster",
		Long: `create-remote-secret makes, in the remote cluster of kubeconfig context --context,
a read-only identity for Poise: the ServiceAccount --service-account in
--namespace, a ClusterRole of the same name that may get, list and watch
services, endpointslices (discovery.k8s.io) and nodes and nothing else, its
ClusterRoleBinding, and a long-lived token Secret of type
kubernetes.io/service-account-token (existing objects are kept; a ClusterRole
with other rules is set to these). It waits, at most --timeout, for the
cluster's token controller to fill the token, then prints on stdout the
Secret to apply to the HOME cluster: poise-remote-NAME in --namespace,
labelled poise.dev/remote-cluster=NAME, whose kubeconfig key reaches the
remote apiserver with that token. Nothing but that Secret goes to stdout, and
no credential goes to stderr.

With --rbac-only it talks to no cluster: it prints the remote objects for
someone allowed to create them to apply; run it again without --rbac-only
once they exist.`,
		Example: `  controlplane create-remote-secret --context east --name east | kubectl --context home apply -f -
  controlplane create-remote-secret --rbac-only > poise-remote-rbac.yaml
  controlplane create-remote-secret --context kind-east --name east \
      --server https://east-control-plane:6443`,
		Args: cobra.NoArgs,
	}
	fs := c.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig that holds --context (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&o.context, "context", "", "kubeconfig context of the REMOTE cluster (required without --rbac-only)")
	fs.StringVar(&o.name, "name", "", "the remote cluster's name in Poise: a DNS label, at most 63 characters (required without --rbac-only)")
	fs.StringVar(&o.namespace, "namespace", "poise-system", "Poise's namespace: the ServiceAccount's in the remote cluster, and the printed Secret's in the home cluster")
	fs.StringVar(&o.serviceAccount, "service-account", "poise-remote-reader", "the ServiceAccount (and ClusterRole, ClusterRoleBinding) in the remote cluster")
	fs.StringVar(&o.server, "server", "", "the remote API server's address to write in the kubeconfig, https://HOST[:PORT] (default: the context's), when Poise reaches it at another address than you do")
	fs.BoolVar(&o.rbacOnly, "rbac-only", false, "print the remote cluster's ServiceAccount, RBAC and token Secret instead of creating them, and nothing else")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "how long to wait for the remote cluster's token controller to fill the token (at most 10m)")
	return command(c, func(cmd *cobra.Command, _ []string) int {
		if err := o.check(cmd); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitUsage
		}
		if o.rbacOnly {
			return writeYAML(stdout, stderr, o.remoteObjects()...)
		}
		return runCreateRemoteSecret(cmd.Context(), o, stdout, stderr)
	})
}

// check refuses a command line that cannot work, naming the flag.
func (o *remoteSecretOptions) check(cmd *cobra.Command) error {
	fs := cmd.Flags()
	if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		return fmt.Errorf("--namespace %q: %s", o.namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(o.serviceAccount); len(errs) > 0 {
		return fmt.Errorf("--service-account %q: %s", o.serviceAccount, strings.Join(errs, "; "))
	}
	if n := len(o.serviceAccount) + len(tokenSecretSuffix); n > validation.DNS1123SubdomainMaxLength {
		return fmt.Errorf("--service-account: at most %d characters, so that its token Secret's name (+%q) fits",
			validation.DNS1123SubdomainMaxLength-len(tokenSecretSuffix), tokenSecretSuffix)
	}
	if o.rbacOnly {
		for _, f := range []string{"context", "kubeconfig", "server", "timeout"} {
			if fs.Changed(f) {
				return fmt.Errorf("--%s: --rbac-only talks to no cluster and prints no Secret", f)
			}
		}
		if fs.Changed("name") {
			return checkClusterName(o.name)
		}
		return nil
	}
	if o.context == "" {
		return errors.New("--context CTX is required: the kubeconfig context of the remote cluster")
	}
	if err := checkClusterName(o.name); err != nil {
		return err
	}
	if o.timeout <= 0 || o.timeout > maxRemoteTimeout {
		return fmt.Errorf("--timeout %v: want more than 0 and at most %v", o.timeout, maxRemoteTimeout)
	}
	if fs.Changed("server") {
		return checkServer(o.server)
	}
	return nil
}

func checkClusterName(name string) error {
	if name == "" {
		return errors.New("--name NAME is required: the remote cluster's name in Poise, a DNS label")
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		if len(name) > validation.DNS1123LabelMaxLength {
			name = name[:validation.DNS1123LabelMaxLength] + "..."
		}
		return fmt.Errorf("--name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

func checkServer(s string) error {
	if len(s) > maxServerURL {
		return fmt.Errorf("--server: at most %d characters", maxServerURL)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("--server %q: %v", s, err)
	case u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("--server %q: want https://HOST[:PORT][/PATH]", s)
	}
	return nil
}

// remoteObjects are what the remote cluster needs, in the order they are
// created: the namespace, the ServiceAccount, the ClusterRole and its
// binding, the token Secret.
func (o *remoteSecretOptions) remoteObjects() []client.Object {
	labels := map[string]string{"app.kubernetes.io/name": "poise", "app.kubernetes.io/component": "remote-reader"}
	meta := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
	}
	sa := o.serviceAccount
	return []client.Object{
		&corev1.Namespace{TypeMeta: typeMeta("v1", "Namespace"), ObjectMeta: meta(o.namespace, "")},
		&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: meta(sa, o.namespace)},
		&rbacv1.ClusterRole{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: meta(sa, ""),
			Rules: remoteReaderRules},
		&rbacv1.ClusterRoleBinding{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: meta(sa, ""),
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: sa},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: o.namespace}}},
		&corev1.Secret{TypeMeta: typeMeta("v1", "Secret"), ObjectMeta: func() metav1.ObjectMeta {
			m := meta(sa+tokenSecretSuffix, o.namespace)
			m.Annotations = map[string]string{corev1.ServiceAccountNameKey: sa}
			return m
		}(), Type: corev1.SecretTypeServiceAccountToken},
	}
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// writeYAML prints objects as one YAML stream for kubectl apply.
func writeYAML(stdout, stderr io.Writer, objs ...client.Object) int {
	var b bytes.Buffer
	for i, o := range objs {
		raw, err := yaml.Marshal(o)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitInvalid
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(raw)
	}
	if _, err := stdout.Write(b.Bytes()); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitInvalid
	}
	return exitOK
}

// kubeContext is the client configuration of a kubeconfig's context (its
// current one when context is ""), from kubeconfig or, when it is "", from
// $KUBECONFIG or ~/.kube/config as kubectl reads them; a context the
// kubeconfig does not have is named with those it has.
func kubeContext(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %v", err)
	}
	if _, ok := raw.Contexts[context]; context != "" && !ok {
		names := slices.Sorted(maps.Keys(raw.Contexts))
		return nil, fmt.Errorf("--context %q: no such context in the kubeconfig (it has: %s)", context, strings.Join(names, ", "))
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		// client-go's own words for these send the user to KUBERNETES_MASTER
		switch {
		case clientcmd.IsEmptyConfig(err) && kubeconfig == "":
			return nil, fmt.Errorf("no kubeconfig: pass --kubeconfig, set $KUBECONFIG or create %s", clientcmd.RecommendedHomeFile)
		case clientcmd.IsEmptyConfig(err):
			return nil, fmt.Errorf("--kubeconfig %s: no cluster, user or current context in it", kubeconfig)
		}
		if context == "" {
			return nil, fmt.Errorf("--kubeconfig: %v", err)
		}
		return nil, fmt.Errorf("--context %q: %v", context, err)
	}
	return rc, nil
}

// remoteCluster is the remote cluster as the kubeconfig context reaches it.
type remoteCluster struct {
	rest *rest.Config
	// where says which kubeconfig context and server, for messages.
	where string
}

func loadRemote(o remoteSecretOptions) (*remoteCluster, error) {
	rc, err := kubeContext(o.kubeconfig, o.context)
	if err != nil {
		return nil, err
	}
	// the CA of a certificate-authority file, embedded
	if err := rest.LoadTLSFiles(rc); err != nil {
		return nil, fmt.Errorf("--context %q: %v", o.context, err)
	}
	rc = rest.CopyConfig(rc)
	rc.Timeout = 30 * time.Second
	// a handful of calls and a poll every 250ms: never wait on the limiter
	rc.QPS, rc.Burst = 20, 40
	return &remoteCluster{rest: rc, where: fmt.Sprintf("the cluster at %s (context %s)", rc.Host, o.context)}, nil
}

func runCreateRemoteSecret(ctx context.Context, o remoteSecretOptions, stdout, stderr io.Writer) int {
	remote, err := loadRemote(o)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitInvalid
	}
	c, err := client.New(remote.rest, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(stderr, "error: a client of %s: %v\n", remote.where, err)
		return exitInvalid
	}
	objs := o.remoteObjects()
	for _, obj := range objs {
		if err := ensure(ctx, c, obj, stderr, remote.where); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			if apierrors.IsForbidden(err) {
				fmt.Fprintln(stderr, "hint: the context may not create these objects: have an administrator apply `controlplane create-remote-secret --rbac-only`, then run this again")
			}
			return exitInvalid
		}
	}
	token, caFromSecret, err := waitToken(ctx, c, objs[len(objs)-1].(*corev1.Secret), o.timeout)
	if err != nil {
		fmt.Fprintf(stderr, "error: %s: %v\n", remote.where, err)
		return exitInvalid
	}
	cluster := &clientcmdapi.Cluster{Server: remote.rest.Host, CertificateAuthorityData: remote.rest.CAData,
		TLSServerName: remote.rest.ServerName}
	if o.server != "" {
		cluster.Server = o.server
	}
	if len(cluster.CertificateAuthorityData) == 0 || remote.rest.Insecure {
		// a context that skips verification, or trusts the system roots:
		// Poise trusts the CA the cluster gives its service accounts
		cluster.CertificateAuthorityData = caFromSecret
		fmt.Fprintf(stderr, "note: the context gives no CA to verify the server with: the kubeconfig trusts the remote cluster's service-account CA (ca.crt of its token Secret)\n")
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[o.name] = cluster
	kc.AuthInfos[o.name] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[o.name] = &clientcmdapi.Context{Cluster: o.name, AuthInfo: o.name}
	kc.CurrentContext = o.name
	raw, err := clientcmd.Write(*kc)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitInvalid
	}
	secret := &corev1.Secret{
		TypeMeta: typeMeta("v1", "Secret"),
		ObjectMeta: metav1.ObjectMeta{Name: remoteSecretPrefix + o.name, Namespace: o.namespace,
			Labels: map[string]string{remoteClusterLabel: o.name}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{kubeconfigKey: raw},
	}
	fmt.Fprintf(stderr, "note: the Secret %s/%s registers %s as %q for the Poise of the home cluster: apply it there\n",
		o.namespace, secret.Name, remote.where, o.name)
	return writeYAML(stdout, stderr, secret)
}

// ensure creates obj unless it exists; an existing ClusterRole with other
// rules gets these, and an existing object that cannot be what obj is (a
// binding to another role, a Secret of another type or account) is an error.
func ensure(ctx context.Context, c client.Client, obj client.Object, stderr io.Writer, where string) error {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	what := kind + " " + obj.GetName()
	if obj.GetNamespace() != "" {
		what = kind + " " + obj.GetNamespace() + "/" + obj.GetName()
	}
	existing := obj.DeepCopyObject().(client.Object)
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	if apierrors.IsNotFound(err) {
		if err := c.Create(ctx, obj.DeepCopyObject().(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s in %s: %w", what, where, err)
		}
		fmt.Fprintf(stderr, "created %s in %s\n", what, where)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s in %s: %w", what, where, err)
	}
	switch want := obj.(type) {
	case *rbacv1.ClusterRole:
		have := existing.(*rbacv1.ClusterRole)
		if equality.Semantic.DeepEqual(have.Rules, want.Rules) && have.AggregationRule == nil {
			break
		}
		have.Rules, have.AggregationRule = want.Rules, nil
		if err := c.Update(ctx, have); err != nil {
			return fmt.Errorf("setting the rules of %s in %s: %w", what, where, err)
		}
		fmt.Fprintf(stderr, "updated %s in %s: its rules were not Poise's\n", what, where)
		return nil
	case *rbacv1.ClusterRoleBinding:
		have := existing.(*rbacv1.ClusterRoleBinding)
		if have.RoleRef != want.RoleRef {
			return fmt.Errorf("%s in %s exists and binds %s %s: delete it, or choose another --service-account", what, where, have.RoleRef.Kind, have.RoleRef.Name)
		}
		if !slices.Contains(have.Subjects, want.Subjects[0]) {
			have.Subjects = append(have.Subjects, want.Subjects[0])
			if err := c.Update(ctx, have); err != nil {
				return fmt.Errorf("adding the ServiceAccount to %s in %s: %w", what, where, err)
			}
			fmt.Fprintf(stderr, "updated %s in %s: it binds the ServiceAccount too\n", what, where)
			return nil
		}
	case *corev1.Secret:
		have := existing.(*corev1.Secret)
		if have.Type != want.Type || have.Annotations[corev1.ServiceAccountNameKey] != want.Annotations[corev1.ServiceAccountNameKey] {
			return fmt.Errorf("%s in %s exists and is not the token Secret of ServiceAccount %s: delete it, or choose another --service-account",
				what, where, want.Annotations[corev1.ServiceAccountNameKey])
		}
	}
	fmt.Fprintf(stderr, "kept %s in %s: it exists\n", what, where)
	return nil
}

// waitToken waits, at most timeout, for the token controller to fill the
// token Secret, and returns its token and CA.
func waitToken(ctx context.Context, c client.Client, secret *corev1.Secret, timeout time.Duration) (token string, ca []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var got corev1.Secret
	var lastErr error
	for {
		err := c.Get(ctx, client.ObjectKeyFromObject(secret), &got)
		switch {
		case err == nil && len(got.Data[corev1.ServiceAccountTokenKey]) > 0:
			return string(got.Data[corev1.ServiceAccountTokenKey]), got.Data[corev1.ServiceAccountRootCAKey], nil
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			return "", nil, fmt.Errorf("reading Secret %s/%s: %w", secret.Namespace, secret.Name, err)
		case err != nil && ctx.Err() == nil:
			lastErr = err // perhaps passing: try again until the timeout
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("the token controller did not fill Secret %s/%s within --timeout %v (is kube-controller-manager running with --service-account-private-key-file?)",
				secret.Namespace, secret.Name, timeout)
			if lastErr != nil {
				msg += fmt.Sprintf("; the last read failed: %v", lastErr)
			}
			return "", nil, errors.New(msg)
		case <-tick.C:
		}
	}
}
