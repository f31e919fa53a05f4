package chart_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The chart's own CA and serving certificate (templates/tls.yaml): what they
// are, where they go, and that nothing but the CA certificate leaves the
// release namespace.

// generatedTLS is the chart's CA and serving certificate as rendered or
// installed: the Secrets' data (decoded) and each namespace's CA ConfigMap.
type generatedTLS struct {
	caCert, caKey     []byte // Secret <fullname>-ca
	cert, key, certCA []byte // Secret <fullname>-tls: tls.crt, tls.key, ca.crt
	dnsNames          string // its poise.dev/dns-names annotation
	configMaps        map[string]string
}

// secretData decodes a Secret's data as rendered (base64) by key.
func secretData(t *testing.T, s obj) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	m, _ := get(s, "data").(map[string]any)
	for k, v := range m {
		b, err := base64.StdEncoding.DecodeString(fmt.Sprint(v))
		if err != nil {
			t.Fatalf("Secret %s: data %s is not base64: %v", s.name(), k, err)
		}
		out[k] = b
	}
	return out
}

// readGeneratedTLS finds the chart's CA and serving certificate of release
// fullname among objs, failing if either Secret is missing.
func readGeneratedTLS(t *testing.T, objs []obj, fullname string) generatedTLS {
	t.Helper()
	g := generatedTLS{configMaps: map[string]string{}}
	var sawCA, sawTLS bool
	for _, o := range objs {
		switch {
		case o.kind() == "Secret" && o.name() == fullname+"-ca":
			if str(o, "type") != "kubernetes.io/tls" {
				t.Errorf("Secret %s: type %q, want kubernetes.io/tls", o.name(), str(o, "type"))
			}
			if str(o, "metadata", "annotations", "helm.sh/resource-policy") != "keep" {
				t.Errorf("Secret %s is not kept by helm uninstall (helm.sh/resource-policy: keep): a reinstall would make a new CA and every client's copy would stop verifying", o.name())
			}
			d := secretData(t, o)
			g.caCert, g.caKey, sawCA = d["tls.crt"], d["tls.key"], true
		case o.kind() == "Secret" && o.name() == fullname+"-tls":
			if str(o, "type") != "kubernetes.io/tls" {
				t.Errorf("Secret %s: type %q, want kubernetes.io/tls", o.name(), str(o, "type"))
			}
			d := secretData(t, o)
			g.cert, g.key, g.certCA, sawTLS = d["tls.crt"], d["tls.key"], d["ca.crt"], true
			g.dnsNames = str(o, "metadata", "annotations", "poise.dev/dns-names")
		case o.kind() == "ConfigMap" && o.name() == fullname+"-ca":
			data, _ := get(o, "data").(map[string]any)
			if len(data) != 1 || str(o, "data", "ca.crt") == "" {
				t.Errorf("ConfigMap %s/%s holds %d keys, want ca.crt alone", str(o, "metadata", "namespace"), o.name(), len(data))
			}
			if get(o, "binaryData") != nil {
				t.Errorf("ConfigMap %s/%s has binaryData", str(o, "metadata", "namespace"), o.name())
			}
			g.configMaps[str(o, "metadata", "namespace")] = str(o, "data", "ca.crt")
		}
	}
	if !sawCA || !sawTLS {
		t.Fatalf("no Secrets %s-ca (found: %v) and %s-tls (found: %v)", fullname, sawCA, fullname, sawTLS)
	}
	return g
}

// serviceNames are the DNS names the serving certificate must carry for
// the xDS Service of a release: the names a client in the cluster dials.
func serviceNames(fullname, namespace string) []string {
	return []string{fullname, fullname + "." + namespace, fullname + "." + namespace + ".svc", fullname + "." + namespace + ".svc.cluster.local"}
}

// check: the CA is a CA, the serving certificate is signed by it, valid now
// for server authentication under every name of names (and no other), its key
// is the one beside it, and the CA certificate, never its key, is what every
// ConfigMap of namespaces holds. It returns the parsed CA and leaf.
func (g generatedTLS) check(t *testing.T, names, namespaces []string) (ca, leaf *x509.Certificate) {
	t.Helper()
	ca = parseCert(t, "the CA certificate", g.caCert)
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("the CA certificate is not a CA (IsCA %v, key usage %b)", ca.IsCA, ca.KeyUsage)
	}
	if _, err := tls.X509KeyPair(g.caCert, g.caKey); err != nil {
		t.Errorf("the CA Secret's key does not match its certificate: %v", err)
	}
	if !bytes.Equal(g.certCA, g.caCert) {
		t.Error("the serving Secret's ca.crt is not the CA certificate")
	}
	leaf = parseCert(t, "the serving certificate", g.cert)
	if _, err := tls.X509KeyPair(g.cert, g.key); err != nil {
		t.Errorf("the serving Secret's tls.key does not match its tls.crt: %v", err)
	}
	if leaf.IsCA {
		t.Error("the serving certificate is a CA")
	}
	if !slices.Equal(sorted(leaf.DNSNames), sorted(names)) || len(leaf.IPAddresses)+len(leaf.URIs) > 0 {
		t.Errorf("the serving certificate names %v (IPs %v, URIs %v), want exactly %v", leaf.DNSNames, leaf.IPAddresses, leaf.URIs, names)
	}
	if g.dnsNames != strings.Join(names, ",") {
		t.Errorf("the serving Secret's poise.dev/dns-names is %q, want %q", g.dnsNames, strings.Join(names, ","))
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, name := range names {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the serving certificate does not verify for %s under the CA: %v", name, err)
		}
	}
	if now := time.Now(); leaf.NotBefore.After(now.Add(time.Minute)) || leaf.NotAfter.Before(now.Add(365*24*time.Hour)) {
		t.Errorf("the serving certificate is valid %v to %v: want from now, for years", leaf.NotBefore, leaf.NotAfter)
	}
	var gotNS []string
	for ns, pemText := range g.configMaps {
		gotNS = append(gotNS, ns)
		if !bytes.Equal(bytes.TrimSpace([]byte(pemText)), bytes.TrimSpace(g.caCert)) {
			t.Errorf("ConfigMap in %s holds another certificate than the CA's", ns)
		}
		if strings.Contains(pemText, "PRIVATE KEY") {
			t.Errorf("ConfigMap in %s holds a private key", ns)
		}
	}
	if !slices.Equal(sorted(gotNS), sorted(namespaces)) {
		t.Errorf("the CA ConfigMap is in namespaces %v, want %v", sorted(gotNS), sorted(namespaces))
	}
	return ca, leaf
}

func parseCert(t *testing.T, what string, pemBytes []byte) *x509.Certificate {
	t.Helper()
	b, rest := pem.Decode(pemBytes)
	if b == nil || b.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) > 0 {
		t.Fatalf("%s is not one PEM certificate: %q", what, pemBytes)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return c
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// generatedMaterial matches what templates/tls.yaml makes anew at every
// `helm template`: the base64 data of its Secrets and the PEM of its
// ConfigMaps.
var (
	generatedData = regexp.MustCompile(`(?m)^(  (?:tls\.crt|tls\.key|ca\.crt): )[A-Za-z0-9+/]{64,}={0,2}$`)
	generatedPEM  = regexp.MustCompile(`(?m)^(\s+)-----BEGIN CERTIFICATE-----\n(?:\s+[A-Za-z0-9+/=]+\n)+\s+-----END CERTIFICATE-----$`)
)

// maskGenerated replaces the generated keys and certificates of a rendering
// by a placeholder, so that a golden file compares everything else.
func maskGenerated(rendered string) string {
	rendered = generatedData.ReplaceAllString(rendered, "${1}<generated>")
	return generatedPEM.ReplaceAllString(rendered, "${1}<generated PEM>")
}

// TestMaskGenerated: the mask takes the generated material out, and nothing
// else (a short value, or a field of another name, stays).
func TestMaskGenerated(t *testing.T) {
	long := strings.Repeat("QUJD", 20)
	in := "data:\n  tls.crt: " + long + "=\n  tls.key: " + long + "\n  other: " + long + "\n  ca.crt: QUJD\n" +
		"  ca.crt: |\n    -----BEGIN CERTIFICATE-----\n    " + long + "\n    QUJD==\n    -----END CERTIFICATE-----\n"
	want := "data:\n  tls.crt: <generated>\n  tls.key: <generated>\n  other: " + long + "\n  ca.crt: QUJD\n" +
		"  ca.crt: |\n    <generated PEM>\n"
	if got := maskGenerated(in); got != want {
		t.Errorf("maskGenerated:\n%s\nwant\n%s", got, want)
	}
}

// TestGeneratedTLS: with the defaults the chart makes a CA and a serving
// certificate for the xDS Service's names, mounts the serving Secret (never
// the CA's), serves TLS from it and publishes the CA certificate in the
// release namespace; extraDNSNames and caNamespaces add names and
// namespaces; a Secret of one's own replaces all of it.
func TestGeneratedTLS(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		objs := parse(t, cases[0].render(t))
		g := readGeneratedTLS(t, objs, "poise")
		g.check(t, serviceNames("poise", "poise-system"), []string{"poise-system"})
		d := one(t, objs, "Deployment")
		pod := get(d, "spec", "template", "spec")
		var secrets []string
		for i := 0; get(pod, "volumes", i) != nil; i++ {
			if s := str(pod, "volumes", i, "secret", "secretName"); s != "" {
				secrets = append(secrets, s)
			}
		}
		if !slices.Equal(secrets, []string{"poise-tls"}) {
			t.Errorf("the pods mount Secrets %v, want poise-tls alone (the CA's key stays unmounted)", secrets)
		}
		args := strs(pod, "containers", 0, "args")
		for _, a := range []string{"--tls-cert=/etc/poise/tls/tls.crt", "--tls-key=/etc/poise/tls/tls.key", "--xds-auth=token", "--xds-token-audience=poise"} {
			if !slices.Contains(args, a) {
				t.Errorf("args %v lack %s", args, a)
			}
		}
		for _, a := range args {
			if strings.HasPrefix(a, "--tls-client-ca") || strings.HasPrefix(a, "--xds-trust-domain") || a == "--xds-allow-anonymous-non-loopback" {
				t.Errorf("default args carry %s", a)
			}
		}
	})
	t.Run("names-and-namespaces", func(t *testing.T) {
		out, err := runHelm(t, "template", "edge", chartDir, "--namespace", "mesh",
			"--set", "tls.generated.extraDNSNames={xds.example.com,*.xds.example.org}",
			"--set", "tls.generated.clusterDomain=corp.internal",
			"--set", "tls.generated.caNamespaces={shop,mesh,geo}")
		if err != nil {
			t.Fatal(err)
		}
		g := readGeneratedTLS(t, parse(t, out), "edge-poise")
		names := []string{"edge-poise", "edge-poise.mesh", "edge-poise.mesh.svc", "edge-poise.mesh.svc.corp.internal", "xds.example.com", "*.xds.example.org"}
		g.check(t, names, []string{"mesh", "shop", "geo"})
	})
	t.Run("own-secret", func(t *testing.T) {
		out, err := runHelm(t, "template", "poise", chartDir, "--namespace", "poise-system", "--set", "tls.secretName=xds-cert")
		if err != nil {
			t.Fatal(err)
		}
		objs := parse(t, out)
		if n := len(byKind(objs, "Secret")) + len(byKind(objs, "ConfigMap")); n != 0 {
			t.Errorf("with tls.secretName the chart still renders %d Secrets and ConfigMaps", n)
		}
		if got := str(one(t, objs, "Deployment"), "spec", "template", "spec", "volumes", 0, "secret", "secretName"); got != "xds-cert" {
			t.Errorf("the pods mount Secret %q, want xds-cert", got)
		}
	})
	t.Run("client-trust-domain", func(t *testing.T) {
		// with a client CA, client certificates identify their clients
		// (xds.auth token is then mtls,token): of cluster.local unless
		// xds.trustDomain says otherwise; empty leaves it to the serving
		// certificate's SPIFFE ID
		for _, tc := range []struct {
			set  []string
			want string // the --xds-trust-domain argument, "" for none
		}{
			{[]string{"tls.secretName=x", "tls.clientCA=true"}, "--xds-trust-domain=cluster.local"},
			{[]string{"tls.secretName=x", "tls.clientCA=true", `xds.auth=mtls\,token`, "xds.trustDomain=prod.example.org"}, "--xds-trust-domain=prod.example.org"},
			{[]string{"tls.secretName=x", "tls.clientCA=true", "xds.auth=mtls", "xds.trustDomain="}, ""},
			{[]string{"tls.secretName=x", "tls.clientCA=true", "xds.auth=none"}, ""},
			{[]string{"tls.secretName=x", "xds.trustDomain=prod.example.org"}, ""},
		} {
			args := []string{"template", "poise", chartDir, "--namespace", "poise-system"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			for _, a := range strs(one(t, parse(t, out), "Deployment"), "spec", "template", "spec", "containers", 0, "args") {
				if strings.HasPrefix(a, "--xds-trust-domain") {
					got = a
				}
			}
			if got != tc.want {
				t.Errorf("%v: %q, want %q", tc.set, got, tc.want)
			}
		}
	})
	t.Run("plaintext-development", func(t *testing.T) {
		out, err := runHelm(t, "template", "poise", chartDir, "--namespace", "poise-system", "--set", "xds.auth=none", "--set", "tls.enabled=false")
		if err != nil {
			t.Fatal(err)
		}
		objs := parse(t, out)
		if n := len(byKind(objs, "Secret")) + len(byKind(objs, "ConfigMap")); n != 0 {
			t.Errorf("without TLS the chart still renders %d Secrets and ConfigMaps", n)
		}
		args := strs(one(t, objs, "Deployment"), "spec", "template", "spec", "containers", 0, "args")
		if !slices.Contains(args, "--xds-auth=none") || !slices.Contains(args, "--xds-allow-anonymous-non-loopback") {
			t.Errorf("xds.auth=none: args %v lack --xds-auth=none and --xds-allow-anonymous-non-loopback", args)
		}
		for _, a := range args {
			if strings.HasPrefix(a, "--tls") {
				t.Errorf("tls.enabled=false: args carry %s", a)
			}
		}
	})
	t.Run("every-rendering-new", func(t *testing.T) {
		// `helm template` reads no cluster: two renderings make two CAs. (An
		// upgrade keeps them: TestInstall.)
		a := readGeneratedTLS(t, parse(t, cases[0].render(t)), "poise")
		b := readGeneratedTLS(t, parse(t, cases[0].render(t)), "poise")
		if bytes.Equal(a.caCert, b.caCert) || bytes.Equal(a.key, b.key) {
			t.Error("two `helm template` runs made the same CA or key: is the key random?")
		}
	})
}
