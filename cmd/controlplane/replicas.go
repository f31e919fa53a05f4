package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/klog/v2"
)

// What status and proxy-config ask when told nothing: the admin address
// serve listens on by default, and in a cluster the pods of the chart's
// release as docs/helm.md installs it.
const (
	defaultAdminAddress = "127.0.0.1:19000"
	defaultNamespace    = "poise-system"
	defaultRelease      = "poise"
	defaultAdminPort    = 19000
)

// The bounds of the flags status and proxy-config share.
const (
	minReplicaTimeout = 100 * time.Millisecond
	maxReplicaTimeout = 10 * time.Minute
	maxAdminPort      = 65535
	// maxReplicas bounds the pods a selector may find: a selector that
	// matches more is not the control plane's.
	maxReplicas = 64
)

// replicaFlags say which replicas status and proxy-config ask: admin
// addresses, or the pods of a release in a cluster, reached through the
// apiserver's port-forward.
type replicaFlags struct {
	addresses                    []string
	kubeconfig, context          string
	namespace, release, selector string
	adminPort                    int
	timeout                      time.Duration
}

func bindReplicaFlags(fs *pflag.FlagSet, f *replicaFlags) {
	fs.StringSliceVar(&f.addresses, "admin-address", nil,
		"admin address of a replica, HOST:PORT (repeatable, or comma-separated); default "+defaultAdminAddress+", what serve listens on, unless a flag below names a cluster")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "find the replicas in this cluster (default with -n, --context, --release or --selector: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "the kubeconfig context of the cluster (default: its current context)")
	fs.StringVarP(&f.namespace, "namespace", "n", defaultNamespace, "the namespace Poise is installed in")
	fs.StringVar(&f.release, "release", defaultRelease,
		"the Helm release: its pods (labels app.kubernetes.io/instance=RELEASE, app.kubernetes.io/part-of=poise, app.kubernetes.io/component=controlplane) are the replicas")
	fs.StringVarP(&f.selector, "selector", "l", "", "instead of --release, the pods matching this label selector are the replicas (Poise installed without the chart)")
	fs.IntVar(&f.adminPort, "admin-port", 0, fmt.Sprintf("the admin port in each pod, 0 to %d (0: the port of the pod's --admin-address, else %d)", maxAdminPort, defaultAdminPort))
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, fmt.Sprintf("how long each replica may take to answer, %v to %v", minReplicaTimeout, maxReplicaTimeout))
}

// kubeFlags are the flags that find the replicas in a cluster.
var kubeFlags = []string{"kubeconfig", "context", "namespace", "release", "selector", "admin-port"}

// check refuses a command line that cannot work, naming the flag; inCluster
// says whether the replicas are to be found in a cluster.
func (f *replicaFlags) check(fs *pflag.FlagSet) (inCluster bool, err error) {
	for _, name := range kubeFlags {
		inCluster = inCluster || fs.Changed(name)
	}
	switch {
	case f.timeout < minReplicaTimeout || f.timeout > maxReplicaTimeout:
		return false, fmt.Errorf("--timeout %v: want %v to %v", f.timeout, minReplicaTimeout, maxReplicaTimeout)
	case f.adminPort < 0 || f.adminPort > maxAdminPort:
		return false, fmt.Errorf("--admin-port %d: want 0 to %d", f.adminPort, maxAdminPort)
	case inCluster && fs.Changed("admin-address"):
		return false, errors.New("--admin-address names the replicas; --kubeconfig, --context, -n, --release, --selector and --admin-port find them in a cluster: give one or the other")
	case fs.Changed("release") && fs.Changed("selector"):
		return false, errors.New("--release and --selector both say which pods are the replicas: give one")
	case fs.Changed("admin-address") && len(f.addresses) == 0:
		return false, errors.New("--admin-address: give at least one HOST:PORT")
	}
	for _, a := range f.addresses {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return false, fmt.Errorf("--admin-address %q: want HOST:PORT", a)
		}
	}
	if !inCluster {
		return false, nil
	}
	if errs := validation.IsDNS1123Label(f.namespace); len(errs) > 0 {
		return false, fmt.Errorf("-n %q: %s", f.namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(f.release); len(errs) > 0 || f.release == "" {
		return false, fmt.Errorf("--release %q: a Helm release name (a label value): %s", f.release, strings.Join(errs, "; "))
	}
	if _, err := f.podSelector(); err != nil {
		return false, fmt.Errorf("--selector %q: %v", f.selector, err)
	}
	return true, nil
}

// podSelector is the selector of the replicas' pods.
func (f *replicaFlags) podSelector() (labels.Selector, error) {
	if f.selector != "" {
		return labels.Parse(f.selector)
	}
	return labels.SelectorFromSet(labels.Set{
		"app.kubernetes.io/instance":  f.release,
		"app.kubernetes.io/part-of":   "poise",
		"app.kubernetes.io/component": "controlplane",
	}), nil
}

// replica is one control-plane replica to ask: its name (HOST:PORT, or
// its pod's name) and the admin address on this machine that reaches it,
// or why it cannot be reached.
type replica struct {
	Name string
	Addr string
	Err  error
	// forwarded is what the port-forward to it said, for an error that
	// needs it.
	forwarded *forwardLog
}

// replicas are the replicas the flags (checked, saying whether they are
// found in a cluster) name, and a function that ends the port-forwards to
// them. A problem finding them (the cluster, no pod) is an error; a
// replica that cannot be reached is one with Err set.
func (f *replicaFlags) replicas(ctx context.Context, inCluster bool, stderr io.Writer) ([]replica, func(), error) {
	if !inCluster {
		addrs := f.addresses
		if len(addrs) == 0 {
			addrs = []string{defaultAdminAddress}
		}
		out := make([]replica, len(addrs))
		for i, a := range addrs {
			out[i] = replica{Name: a, Addr: a}
		}
		return out, func() {}, nil
	}
	rc, where, err := f.restConfig()
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", where, err)
	}
	pods, err := f.findPods(ctx, cs, where, stderr)
	if err != nil {
		return nil, nil, err
	}
	var (
		out   = make([]replica, len(pods))
		stops []func()
		mu    sync.Mutex
		wg    sync.WaitGroup
	)
	for i := range pods {
		wg.Go(func() {
			p := &pods[i]
			out[i] = replica{Name: p.Name}
			port := f.adminPort
			if port == 0 {
				port = podAdminPort(p)
			}
			local, log, stop, err := forward(ctx, rc, cs, p, port, f.timeout)
			out[i].forwarded = log
			if err != nil {
				out[i].Err = fmt.Errorf("port-forward to pod %s port %d: %v", p.Name, port, err)
				return
			}
			out[i].Addr = local
			mu.Lock()
			stops = append(stops, stop)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, func() {
		for _, stop := range stops {
			stop()
		}
	}, nil
}

// restConfig is the client configuration of the cluster the flags name,
// and where it came from, for messages. A kubeconfig or context that
// cannot be read is a wrong command line (usageError).
func (f *replicaFlags) restConfig() (*rest.Config, string, error) {
	rc, err := kubeContext(f.kubeconfig, f.context)
	if err != nil {
		return nil, "", usageError{err}
	}
	rc.Timeout = f.timeout // rc is kubeContext's own
	from := "$KUBECONFIG or ~/.kube/config"
	if f.kubeconfig != "" {
		from = f.kubeconfig
	}
	if f.context != "" {
		from += ", context " + f.context
	}
	return rc, fmt.Sprintf("the cluster at %s (kubeconfig %s)", rc.Host, from), nil
}

// usageError is an error of the command line (exit 2) found only once it
// is used, such as a kubeconfig that cannot be read.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// exitFor is the exit code of an error finding the replicas.
func exitFor(err error) int {
	if errors.As(err, new(usageError)) {
		return exitUsage
	}
	return exitInvalid
}

// findPods lists the running pods of the replicas, naming on stderr those
// that are not running (they serve nothing).
func (f *replicaFlags) findPods(ctx context.Context, cs kubernetes.Interface, where string, stderr io.Writer) ([]corev1.Pod, error) {
	sel, _ := f.podSelector()
	list, err := cs.CoreV1().Pods(f.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String(), Limit: maxReplicas + 1})
	if err != nil {
		return nil, fmt.Errorf("listing the pods %s in namespace %s of %s: %v", sel, f.namespace, where, err)
	}
	if len(list.Items) > maxReplicas || list.Continue != "" {
		return nil, fmt.Errorf("more than %d pods %s in namespace %s: that is not one release of Poise; say which with --release or --selector", maxReplicas, sel, f.namespace)
	}
	var running []corev1.Pod
	for _, p := range list.Items {
		switch {
		case p.DeletionTimestamp != nil:
			fmt.Fprintf(stderr, "note: pod %s is terminating: not asked\n", p.Name)
		case p.Status.Phase != corev1.PodRunning:
			fmt.Fprintf(stderr, "note: pod %s is %s: not asked\n", p.Name, orDash(string(p.Status.Phase)))
		default:
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		how := "(--selector " + f.selector + ")"
		if f.selector == "" {
			how = "of release " + f.release + " (--release; -n for another namespace)"
		}
		return nil, fmt.Errorf("no running pod %s in namespace %s of %s", how, f.namespace, where)
	}
	slices.SortFunc(running, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return running, nil
}

// podAdminPort is the port of the --admin-address a pod's container
// serves with (the chart's 127.0.0.1:19000), else the default.
func podAdminPort(p *corev1.Pod) int {
	for _, c := range p.Spec.Containers {
		args := append(slices.Clone(c.Command), c.Args...)
		for i, a := range args {
			var addr string
			switch {
			case strings.HasPrefix(a, "--admin-address="):
				addr = strings.TrimPrefix(a, "--admin-address=")
			case a == "--admin-address" && i+1 < len(args):
				addr = args[i+1]
			default:
				continue
			}
			if _, port, err := net.SplitHostPort(addr); err == nil {
				if n, err := strconv.Atoi(port); err == nil && n > 0 && n <= maxAdminPort {
					return n
				}
			}
		}
	}
	return defaultAdminPort
}

// forwardLog keeps the first lines the port-forward logs (what went wrong
// in forwarding a connection to the pod), bounded.
type forwardLog struct {
	mu    sync.Mutex
	lines []string
}

const maxForwardLines = 4

func (l *forwardLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < maxForwardLines {
		l.lines = append(l.lines, oneLine(line, 300))
	}
}

func (l *forwardLog) String() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "; ")
}

// forward opens a port-forward through the apiserver to port of pod, as
// kubectl port-forward does (WebSocket, else SPDY), on a loopback port of
// this machine: the admin port listens on the pod's loopback, which a
// port-forward reaches, since it connects inside the pod's network
// namespace. It returns that local address and a function that ends it.
func forward(ctx context.Context, rc *rest.Config, cs kubernetes.Interface, p *corev1.Pod, port int, timeout time.Duration) (string, *forwardLog, func(), error) {
	log := &forwardLog{}
	logger := funcr.New(func(_, args string) { log.add(args) }, funcr.Options{})
	u := portForwardURL(cs, p.Namespace, p.Name)
	transport, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return "", log, nil, err
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	wsDialer, err := portforward.NewSPDYOverWebsocketDialerWithLogger(logger, u, rc)
	if err != nil {
		return "", log, nil, err
	}
	dialer := portforward.NewFallbackDialer(wsDialer, spdyDialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	fctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddressesWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, ready, io.Discard, io.Discard)
	if err != nil {
		cancel()
		return "", log, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	stop := func() {
		cancel()
		<-done
	}
	select {
	case <-ready:
	case err := <-done:
		cancel()
		return "", log, nil, err
	case <-time.After(timeout):
		stop()
		return "", log, nil, fmt.Errorf("not ready within --timeout %v", timeout)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		stop()
		return "", log, nil, fmt.Errorf("no local port: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), log, stop, nil
}

// portForwardURL is the URL of a pod's portforward subresource.
func portForwardURL(cs kubernetes.Interface, namespace, pod string) *url.URL {
	return cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
}

// maxAdminResponse bounds what is read of one replica's admin answer.
const maxAdminResponse = 32 << 20

// adminError is a replica's answer that is not 200: its status and, for
// /debug/config, what is missing.
type adminError struct {
	path    string
	status  string
	message string
	missing string
}

func (e *adminError) Error() string {
	return fmt.Sprintf("GET %s: %s: %s", e.path, e.status, e.message)
}

// getAdmin GETs path of a replica's admin address and decodes its JSON
// into v, reading at most maxAdminResponse bytes.
func getAdmin(ctx context.Context, r replica, path string, timeout time.Duration, v any) error {
	if r.Err != nil {
		return r.Err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if fw := r.forwarded.String(); fw != "" {
			return fmt.Errorf("%v (port-forward: %s)", err, fw)
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminResponse+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if len(b) > maxAdminResponse {
		return fmt.Errorf("GET %s: the answer is over %d MiB", path, maxAdminResponse>>20)
	}
	if resp.StatusCode != http.StatusOK {
		var body struct {
			Error   string `json:"error"`
			Missing string `json:"missing"`
		}
		if json.Unmarshal(b, &body) != nil || body.Error == "" {
			body.Error = oneLine(string(b), 200)
		}
		return &adminError{path: path, status: resp.Status, message: oneLine(body.Error, 300), missing: body.Missing}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
