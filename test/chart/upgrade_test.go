package chart_test

import (
	"bytes"
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// installedTLS reads the chart's generated CA and serving certificate of
// release fullname from the server: its two Secrets in namespace, and the
// CA ConfigMaps of namespaces.
func installedTLS(t *testing.T, srv *apiServer, fullname, namespace string, namespaces []string) generatedTLS {
	t.Helper()
	ctx := context.Background()
	var objs []obj
	fetch := func(kind, ns, name string) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind(kind)
		if err := srv.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			t.Fatalf("%s %s/%s: %v", kind, ns, name, err)
		}
		objs = append(objs, obj(u.Object))
	}
	fetch("Secret", namespace, fullname+"-ca")
	fetch("Secret", namespace, fullname+"-tls")
	for _, ns := range namespaces {
		fetch("ConfigMap", ns, fullname+"-ca")
	}
	return readGeneratedTLS(t, objs, fullname)
}

// checkUpgradeKeepsTLS: the release installed with the defaults has the
// chart's CA and a serving certificate for its Service's names; `helm
// upgrade`, twice, keeps both byte for byte (and adds the CA ConfigMap to
// the namespace asked for, as the walkthrough does for its Envoy); an
// upgrade that changes the certificate's names has the same CA sign a new
// certificate, so clients keep trusting it.
func checkUpgradeKeepsTLS(t *testing.T, srv *apiServer, c renderCase) {
	t.Helper()
	name := fullname(c.release)
	names := serviceNames(name, c.namespace)
	installed := installedTLS(t, srv, name, c.namespace, []string{c.namespace})
	ca, leaf := installed.check(t, names, []string{c.namespace})
	t.Logf("installed: CA %q (serial %x), serving certificate for %v until %v", ca.Subject.CommonName, ca.SerialNumber, leaf.DNSNames, leaf.NotAfter)

	upgrade := func(set ...string) {
		t.Helper()
		args := []string{"upgrade", c.release, chartDir, "--namespace", c.namespace, "--wait=false", "--kubeconfig", srv.kubeconfig}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if _, err := runHelm(t, args...); err != nil {
			t.Fatal(err)
		}
	}
	same := func(a, b generatedTLS) bool {
		return bytes.Equal(a.caCert, b.caCert) && bytes.Equal(a.caKey, b.caKey) && bytes.Equal(a.cert, b.cert) && bytes.Equal(a.key, b.key)
	}
	withShop := []string{c.namespace, shopNS}
	for i := range 2 {
		upgrade("tls.generated.caNamespaces={" + shopNS + "}")
		got := installedTLS(t, srv, name, c.namespace, withShop)
		got.check(t, names, withShop)
		if !same(installed, got) {
			t.Fatalf("helm upgrade %d changed the CA or the serving certificate: every client would have to be given the new CA", i+1)
		}
	}

	extra := "xds.example.com"
	upgrade("tls.generated.caNamespaces={"+shopNS+"}", "tls.generated.extraDNSNames={"+extra+"}")
	renamed := installedTLS(t, srv, name, c.namespace, withShop)
	_, newLeaf := renamed.check(t, append(names, extra), withShop)
	if !bytes.Equal(renamed.caCert, installed.caCert) || !bytes.Equal(renamed.caKey, installed.caKey) {
		t.Error("a change of the certificate's names made a new CA: it must be signed by the one clients already trust")
	}
	if bytes.Equal(renamed.cert, installed.cert) {
		t.Error("extraDNSNames changed but the serving certificate did not")
	}
	t.Logf("after renaming: the same CA signed a certificate for %v", newLeaf.DNSNames)

	// Starting over: without the CA's Secret an upgrade makes a new CA and
	// signs a new certificate with it, and the ConfigMaps follow. (Back to
	// the walkthrough's values, for the suites that follow.)
	var caSecret corev1.Secret
	if err := srv.c.Get(context.Background(), client.ObjectKey{Namespace: c.namespace, Name: name + "-ca"}, &caSecret); err != nil {
		t.Fatal(err)
	}
	if err := srv.c.Delete(context.Background(), &caSecret); err != nil {
		t.Fatal(err)
	}
	upgrade("tls.generated.caNamespaces={" + shopNS + "}")
	fresh := installedTLS(t, srv, name, c.namespace, withShop)
	fresh.check(t, names, withShop)
	if bytes.Equal(fresh.caCert, installed.caCert) || bytes.Equal(fresh.cert, renamed.cert) {
		t.Error("with the CA's Secret deleted, the upgrade kept the old CA or certificate")
	}
}
