package kube_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"poise.dev/poise/test/cpbinary"
	"poise.dev/poise/test/testkit"
)

// TestCreateRemoteSecret runs `controlplane create-remote-secret` against
// the real apiserver as the remote cluster. envtest runs no token
// controller, so the test plays it: it fills the token Secret with a token
// the apiserver signs for the ServiceAccount, bound to that Secret. The
// command must create exactly the read-only RBAC, print one labelled Secret
// whose kubeconfig embeds everything (no file paths, no plugins), and that
// kubeconfig must read services, endpointslices and nodes and be refused a
// write and Secrets.
func TestCreateRemoteSecret(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	bin := cpbinary.Build(t)
	const sa = "poise-remote-reader"
	t.Cleanup(func() {
		ctx := context.Background()
		_ = k8s.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}})
		_ = k8s.Delete(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sa}})
	})

	// the admin's kubeconfig, its CA in a file as many are
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, restConfig.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: restConfig.Host, CertificateAuthority: caFile}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: restConfig.CertData, ClientKeyData: restConfig.KeyData,
		Token: restConfig.BearerToken}
	cfg.Contexts["remote"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	cfg.Contexts["other"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	cfg.CurrentContext = "other"
	admin := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, admin); err != nil {
		t.Fatal(err)
	}

	create := func(extra ...string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"create-remote-secret", "--kubeconfig", admin, "--context", "remote",
			"--name", "east", "--namespace", ns, "--timeout", "30s"}, extra...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		tokenController(t, ns, sa+"-token", done)
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("create-remote-secret %v: exit %d\n%s", extra, code, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	stdout, stderr := create()
	t.Logf("stderr:\n%s", stderr)

	// the remote objects, exactly
	var role rbacv1.ClusterRole
	if err := k8s.Get(t.Context(), client.ObjectKey{Name: sa}, &role); err != nil {
		t.Fatal(err)
	}
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
	}
	if !equality.Semantic.DeepEqual(role.Rules, wantRules) || role.AggregationRule != nil {
		t.Errorf("ClusterRole %s rules %+v, want %+v", sa, role.Rules, wantRules)
	}
	var binding rbacv1.ClusterRoleBinding
	if err := k8s.Get(t.Context(), client.ObjectKey{Name: sa}, &binding); err != nil {
		t.Fatal(err)
	}
	if want := (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: sa}); binding.RoleRef != want ||
		len(binding.Subjects) != 1 || binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ns}) {
		t.Errorf("ClusterRoleBinding %s: roleRef %+v, subjects %+v", sa, binding.RoleRef, binding.Subjects)
	}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: sa}, &corev1.ServiceAccount{}); err != nil {
		t.Errorf("ServiceAccount %s/%s: %v", ns, sa, err)
	}
	var tokenSecret corev1.Secret
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: sa + "-token"}, &tokenSecret); err != nil {
		t.Fatal(err)
	}
	if tokenSecret.Type != corev1.SecretTypeServiceAccountToken || tokenSecret.Annotations[corev1.ServiceAccountNameKey] != sa {
		t.Errorf("token Secret: type %s, annotations %v", tokenSecret.Type, tokenSecret.Annotations)
	}
	token := string(tokenSecret.Data[corev1.ServiceAccountTokenKey])
	if strings.Contains(stderr, token) {
		t.Error("stderr carries the token")
	}

	// stdout: one Secret for the home cluster
	secret, kc := parseRemoteSecret(t, stdout)
	if secret.Name != "poise-remote-east" || secret.Namespace != ns || secret.Labels["poise.dev/remote-cluster"] != "east" {
		t.Errorf("printed Secret %s/%s, labels %v", secret.Namespace, secret.Name, secret.Labels)
	}
	ctxName := kc.CurrentContext
	kctx := kc.Contexts[ctxName]
	if kctx == nil || kc.Clusters[kctx.Cluster] == nil || kc.AuthInfos[kctx.AuthInfo] == nil {
		t.Fatalf("the kubeconfig's current context %q is incomplete", ctxName)
	}
	cluster, user := kc.Clusters[kctx.Cluster], kc.AuthInfos[kctx.AuthInfo]
	if cluster.Server != restConfig.Host || !bytes.Equal(cluster.CertificateAuthorityData, restConfig.CAData) ||
		cluster.CertificateAuthority != "" || cluster.InsecureSkipTLSVerify {
		t.Errorf("cluster: server %s (want %s), CA data equal: %v, CA file %q, insecure %v", cluster.Server, restConfig.Host,
			bytes.Equal(cluster.CertificateAuthorityData, restConfig.CAData), cluster.CertificateAuthority, cluster.InsecureSkipTLSVerify)
	}
	if user.Token != token || user.TokenFile != "" || user.Exec != nil || user.AuthProvider != nil ||
		user.ClientCertificate != "" || user.ClientKey != "" || len(user.ClientCertificateData) > 0 || user.Username != "" {
		t.Errorf("user: want only the ServiceAccount's token, got %+v", user)
	}

	// what the kubeconfig may do in the remote cluster
	rc, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["kubeconfig"])
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	reads := map[string]func() error{
		"list services (all namespaces)": func() error { _, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{}); return err },
		"list endpointslices (all namespaces)": func() error {
			_, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			return err
		},
		"list nodes": func() error { _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
		"watch endpointslices": func() error {
			w, err := cs.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
	}
	for what, f := range reads {
		if err := f(); err != nil {
			t.Errorf("the remote kubeconfig may not %s: %v", what, err)
		}
	}
	refused := map[string]func() error{
		"create a Service": func() error {
			_, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}, metav1.CreateOptions{})
			return err
		},
		"create an EndpointSlice": func() error {
			_, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web"},
				AddressType: discoveryv1.AddressTypeIPv4}, metav1.CreateOptions{})
			return err
		},
		"list Secrets":              func() error { _, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err },
		"get its own token Secret":  func() error { _, err := cs.CoreV1().Secrets(ns).Get(ctx, sa+"-token", metav1.GetOptions{}); return err },
		"list ConfigMaps":           func() error { _, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); return err },
		"list Pods (all namespace)": func() error { _, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err },
	}
	for what, f := range refused {
		if err := f(); !apierrors.IsForbidden(err) {
			t.Errorf("the remote kubeconfig may %s: want Forbidden, got %v", what, err)
		}
	}

	// again, with --server: the objects are kept, the ClusterRole set back
	// to its rules, the same token written with the other address
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
	if err := k8s.Update(ctx, &role); err != nil {
		t.Fatal(err)
	}
	stdout, stderr = create("--server", "https://east.example:6443")
	for _, want := range []string{"kept ServiceAccount " + ns + "/" + sa, "updated ClusterRole " + sa, "kept ClusterRoleBinding " + sa,
		"kept Secret " + ns + "/" + sa + "-token"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the second run does not say %q:\n%s", want, stderr)
		}
	}
	if err := k8s.Get(ctx, client.ObjectKey{Name: sa}, &role); err != nil || !equality.Semantic.DeepEqual(role.Rules, wantRules) {
		t.Errorf("the second run leaves the ClusterRole with %+v (%v)", role.Rules, err)
	}
	_, kc = parseRemoteSecret(t, stdout)
	if c := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]; c.Server != "https://east.example:6443" {
		t.Errorf("--server: the kubeconfig's server is %s", c.Server)
	}
	if u := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]; u.Token != token {
		t.Error("the second run wrote another token")
	}

	// no token controller: the wait ends at --timeout, exit 1, nothing on stdout
	t.Cleanup(func() {
		ctx := context.Background()
		_ = k8s.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lonely"}})
		_ = k8s.Delete(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "lonely"}})
	})
	cmd := exec.CommandContext(ctx, bin, "create-remote-secret", "--kubeconfig", admin, "--context", "remote",
		"--name", "east", "--namespace", ns, "--service-account", "lonely", "--timeout", "1s")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 || out.Len() > 0 || time.Since(start) > 20*time.Second ||
		!strings.Contains(errOut.String(), "did not fill Secret "+ns+"/lonely-token within --timeout 1s") {
		t.Errorf("without a token controller: exit %d after %v, stdout %q, stderr:\n%s", code, time.Since(start), out.String(), errOut.String())
	}
}

// tokenController does the token controller's work on the Secret ns/name
// until the command ends (done): once the Secret exists it fills token,
// ca.crt and namespace, the token bound to the Secret.
func tokenController(t *testing.T, ns, name string, done <-chan error) {
	t.Helper()
	testkit.EventuallyEvery(t, time.Minute, 50*time.Millisecond, "create-remote-secret ends", func() (bool, string) {
		select {
		case <-done:
			return true, ""
		default:
		}
		var s corev1.Secret
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil || len(s.Data["token"]) > 0 {
			return false, "the command runs"
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.Annotations[corev1.ServiceAccountNameKey]}}
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: new(int64(3600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: s.Name, UID: s.UID},
		}}
		if err := k8s.SubResource("token").Create(t.Context(), sa, tr); err != nil {
			t.Fatalf("TokenRequest for %s/%s: %v", ns, sa.Name, err)
		}
		s.Data = map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": restConfig.CAData, "namespace": []byte(ns)}
		if err := k8s.Update(t.Context(), &s); err != nil {
			t.Fatalf("filling the token Secret: %v", err)
		}
		return false, "the token Secret filled"
	})
}

// parseRemoteSecret reads the command's stdout: exactly one Secret, with a
// kubeconfig key that loads.
func parseRemoteSecret(t *testing.T, stdout string) (*corev1.Secret, *clientcmdapi.Config) {
	t.Helper()
	if strings.Contains(stdout, "\n---") {
		t.Fatalf("stdout holds more than one document:\n%s", stdout)
	}
	var secret corev1.Secret
	if err := yaml.UnmarshalStrict([]byte(stdout), &secret); err != nil {
		t.Fatalf("stdout is not a Secret: %v", err)
	}
	if secret.Kind != "Secret" || secret.APIVersion != "v1" || len(secret.Data) != 1 || len(secret.StringData) != 0 {
		t.Fatalf("stdout: %s %s with data keys %d, stringData %d", secret.APIVersion, secret.Kind, len(secret.Data), len(secret.StringData))
	}
	kc, err := clientcmd.Load(secret.Data["kubeconfig"])
	if err != nil {
		t.Fatalf("the kubeconfig key: %v", err)
	}
	return &secret, kc
}
