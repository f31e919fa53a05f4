package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"poise.dev/poise/api/v1alpha1"
	"poise.dev/poise/pkg/kube/source"
	"poise.dev/poise/pkg/loadgen"
)

func main() {
	// Its own flag set: controller-runtime registers -kubeconfig on the
	// default one.
	fs := flag.NewFlagSet("kubefleet", flag.ExitOnError)
	upstreams := fs.Int("upstreams", 5000, "upstreams (Services with one EndpointSlice of 20 endpoints, and their Upstreams), 1 to 62500")
	kubeconfig := fs.String("out", "", "where to write the kubeconfig (required)")
	crds := fs.String("crds", "config/crd", "the CRDs to install")
	_ = fs.Parse(os.Args[1:])
	if *kubeconfig == "" || *upstreams < 1 || *upstreams > loadgen.MaxUpstreams {
		fmt.Fprintf(os.Stderr, "kubefleet: want -out PATH and -upstreams 1 to %d\n", loadgen.MaxUpstreams)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *upstreams, *kubeconfig, *crds); err != nil {
		fmt.Fprintln(os.Stderr, "kubefleet:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, upstreams int, kubeconfig, crds string) error {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set (bash hack/test-binaries.sh prints it)")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{crds}, ErrorIfCRDPathMissing: true, BinaryAssetsDirectory: assets}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start kube-apiserver and etcd: %w", err)
	}
	defer func() { _ = env.Stop() }()
	if err := writeKubeconfig(cfg, kubeconfig); err != nil {
		return err
	}
	scheme, err := source.Scheme()
	if err != nil {
		return err
	}
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 2000, 4000
	k8s, err := client.New(c, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := populate(ctx, k8s, upstreams); err != nil {
		return err
	}
	fmt.Printf("ready: %d upstreams in namespace %s, kubeconfig %s (%v)\n", upstreams, loadgen.Namespace, kubeconfig, time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	return nil
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "admin"}
	kc.CurrentContext = "bench"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*kc, path)
}

// populate creates the namespace, three zones' Nodes and, per upstream, its
// Service, EndpointSlice and Upstream, 16 at a time.
func populate(ctx context.Context, k8s client.Client, upstreams int) error {
	ns := loadgen.Namespace
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	zones := []string{"a", "b", "c"}
	for _, z := range zones {
		if err := k8s.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + z, Labels: map[string]string{
			source.LabelRegion: "eu-west", source.LabelZone: "eu-west-" + z}}}); err != nil {
			return err
		}
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				if err := createUpstream(ctx, k8s, ns, u, zones); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for u := range upstreams {
		select {
		case work <- u:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

func createUpstream(ctx context.Context, k8s client.Client, ns string, u int, zones []string) error {
	name := loadgen.UpstreamName(u)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "poise-kubefleet"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}},
	}
	for i := range 20 {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", u/250, u%250, i+1)},
			NodeName:   new("node-" + zones[i%len(zones)]),
			Conditions: discoveryv1.EndpointConditions{Ready: new(true), Serving: new(true), Terminating: new(false)},
		})
	}
	up := &v1alpha1.Upstream{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.UpstreamSpec{Protocol: v1alpha1.ProtocolHTTP2,
		EndpointsFrom: &v1alpha1.EndpointsFrom{Service: v1alpha1.ServiceReference{Name: name, Port: intstr.FromString("http")}}}}
	for _, o := range []client.Object{svc, es, up} {
		if err := k8s.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s/%s: %w", o, ns, o.GetName(), err)
		}
	}
	return nil
}
