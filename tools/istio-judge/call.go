package main

import (
	"fmt"
	"net/http"
	"strings"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/simulation"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config/constants"
	"istio.io/istio/pkg/config/host"
	"istio.io/istio/pkg/wellknown"
)

// Result is what happens to one Call.
type Result struct {
	Name string `json:"name"`
	// Decision: "allow" (reached a cluster), "deny" (an RBAC filter refused it) or "error" (see Error).
	Decision     string `json:"decision"`
	Error        string `json:"error,omitempty"`
	ListenerPort int    `json:"listenerPort,omitempty"`
	Address      string `json:"address,omitempty"`
	Listener     string `json:"listener,omitempty"`
	FilterChain  string `json:"filterChain,omitempty"`
	RouteConfig  string `json:"routeConfig,omitempty"`
	VirtualHost  string `json:"virtualHost,omitempty"`
	Route        string `json:"route,omitempty"`
	Cluster      string `json:"cluster,omitempty"`
	// ClusterKnown says whether the proxy has the chosen cluster at all (Envoy answers 503 when not).
	ClusterKnown bool       `json:"clusterKnown"`
	Filters      []string   `json:"filters,omitempty"`
	RBAC         []Decision `json:"rbac"`
	DeniedBy     string     `json:"deniedBy,omitempty"`
}

// proxyConfig is what istiod generates for one proxy.
type proxyConfig struct {
	proxy     *model.Proxy
	listeners []*listenerpb.Listener
	routes    []*routepb.RouteConfiguration
	clusters  map[string]bool
	pod       *corev1.Pod
}

type cluster struct {
	server   *xds.FakeDiscoveryServer
	pods     map[string]*corev1.Pod
	services []*corev1.Service
	proxies  map[string]*proxyConfig
}

func newCluster(server *xds.FakeDiscoveryServer, objects []runtime.Object) *cluster {
	c := &cluster{server: server, pods: map[string]*corev1.Pod{}, proxies: map[string]*proxyConfig{}}
	for _, obj := range objects {
		switch o := obj.(type) {
		case *corev1.Pod:
			c.pods[o.Namespace+"/"+o.Name] = o
		case *corev1.Service:
			c.services = append(c.services, o)
		}
	}
	return c
}

// proxyFor builds (once) the configuration istiod serves the proxy of pod `from`.
func (c *cluster) proxyFor(from string, router bool) (*proxyConfig, error) {
	key := fmt.Sprintf("%s|%v", from, router)
	if pc, ok := c.proxies[key]; ok {
		return pc, nil
	}
	pod, ok := c.pods[from]
	if !ok {
		return nil, fmt.Errorf("no pod %q among the objects", from)
	}
	if pod.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %q has no status.podIP", from)
	}
	proxyType := model.SidecarProxy
	if router {
		proxyType = model.Router
	}
	proxy := c.server.SetupProxy(&model.Proxy{
		Type:            proxyType,
		ID:              pod.Name + "." + pod.Namespace,
		IPAddresses:     []string{pod.Status.PodIP},
		ConfigNamespace: pod.Namespace,
		Labels:          pod.Labels,
		Metadata: &model.NodeMetadata{
			Namespace:      pod.Namespace,
			Labels:         pod.Labels,
			ClusterID:      constants.DefaultClusterName,
			ServiceAccount: pod.Spec.ServiceAccountName,
		},
	})
	listeners := c.server.Listeners(proxy)
	pc := &proxyConfig{
		proxy:     proxy,
		listeners: listeners,
		routes:    c.server.RoutesFromListeners(proxy, listeners),
		clusters:  clusterNames(c.server.Clusters(proxy)),
		pod:       pod,
	}
	c.proxies[key] = pc
	return pc, nil
}

func clusterNames(clusters []*clusterpb.Cluster) map[string]bool {
	out := make(map[string]bool, len(clusters))
	for _, cl := range clusters {
		out[cl.Name] = true
	}
	return out
}

// judgeGuarded judges one call in its own goroutine, so that istiod failing on it (a Fatal through the
// failer, or a panic) makes that call's result an error and leaves the other calls to be judged.
func (c *cluster) judgeGuarded(t *failer, call Call) Result {
	var result *Result
	var crash any
	_ = t.run(func() {
		defer func() { crash = recover() }()
		r := c.judgeCall(call)
		result = &r
	})
	if result != nil {
		return *result
	}
	cause := t.Err()
	if crash != nil {
		cause = fmt.Errorf("%v", crash)
	}
	return errorResult(Result{Name: call.Name, RBAC: []Decision{}}, fmt.Errorf("istiod failed on this call: %v", cause))
}

func (c *cluster) judgeCall(call Call) (result Result) {
	result = Result{Name: call.Name, RBAC: []Decision{}}
	pc, err := c.proxyFor(call.From, call.Router)
	if err != nil {
		return errorResult(result, err)
	}
	simCall, err := c.simulationCall(pc, call)
	if err != nil {
		return errorResult(result, err)
	}
	result.ListenerPort = simCall.Port
	result.Address = simCall.Address
	chains := nameChainsUniquely(pc.listeners)
	defer chains.restore()
	sim := &simulation.Simulation{Listeners: pc.listeners, Routes: pc.routes}
	simResult, err := runSimulation(sim, simCall)
	if err != nil {
		return errorResult(result, err)
	}
	result.Listener = simResult.ListenerMatched
	fc := chains.chain(simResult.FilterChainMatched)
	chains.restore()
	if fc != nil {
		result.FilterChain = fc.GetName()
	}
	result.RouteConfig = simResult.RouteConfigMatched
	result.VirtualHost = simResult.VirtualHostMatched
	result.Route = simResult.RouteMatched
	result.Cluster = simResult.ClusterMatched
	result.ClusterKnown = pc.clusters[result.Cluster]
	if simResult.Error != nil && !routingError(simResult.Error) {
		return errorResult(result, simResult.Error)
	}
	if fc != nil {
		req := requestOf(call, simCall, httpManager(fc))
		result.Filters = filterNames(fc)
		result.RBAC = evaluateChain(fc, req)
		for _, d := range result.RBAC {
			if !d.Allowed {
				result.Decision = "deny"
				result.DeniedBy = d.Filter + ": " + d.Reason
				return result
			}
		}
	}
	if simResult.Error != nil {
		return errorResult(result, simResult.Error)
	}
	if result.Cluster == "" {
		return errorResult(result, fmt.Errorf("no cluster chosen"))
	}
	if !result.ClusterKnown && !strings.HasPrefix(result.Cluster, "Inbound") {
		return errorResult(result, fmt.Errorf("cluster %q is not among the proxy's clusters (503)", result.Cluster))
	}
	result.Decision = "allow"
	return result
}

// routingError is an error found after RBAC would already have run (Envoy routes in the last filter).
func routingError(err error) bool {
	return err == simulation.ErrNoRoute || err == simulation.ErrNoVirtualHost || err == simulation.ErrTLSRedirect
}

func errorResult(r Result, err error) Result {
	r.Decision = "error"
	r.Error = err.Error()
	return r
}

// runSimulation runs Istio's traffic simulation; it reports through a nil *testing.T only when it cannot
// read the configuration, which surfaces here as a panic, turned into an error.
func runSimulation(sim *simulation.Simulation, call simulation.Call) (result simulation.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the simulation could not read the generated configuration: %v", r)
		}
	}()
	return sim.Run(call), nil
}

func (c *cluster) simulationCall(pc *proxyConfig, call Call) (simulation.Call, error) {
	mode := call.Mode
	if mode == "" {
		mode = "outbound"
		if call.Router {
			mode = "gateway"
		}
	}
	out := simulation.Call{Port: call.Port, Path: call.Path, HostHeader: call.Host, Sni: call.SNI}
	switch mode {
	case "outbound":
		out.CallMode = simulation.CallModeOutbound
	case "inbound":
		out.CallMode = simulation.CallModeInbound
	case "gateway":
		out.CallMode = simulation.CallModeGateway
	default:
		return out, fmt.Errorf("mode %q is not outbound, inbound or gateway", mode)
	}
	switch strings.ToUpper(call.Protocol) {
	case "HTTP", "":
		out.Protocol = simulation.HTTP
	case "HTTP2", "GRPC":
		out.Protocol = simulation.HTTP2
	case "TCP", "TLS":
		out.Protocol = simulation.TCP
	default:
		return out, fmt.Errorf("protocol %q is not HTTP, HTTP2, TLS or TCP", call.Protocol)
	}
	tlsMode := call.TLS
	if tlsMode == "" {
		switch {
		case strings.EqualFold(call.Protocol, "TLS"):
			tlsMode = "tls"
		case call.Peer != "" && mode != "outbound":
			tlsMode = "mtls"
		default:
			tlsMode = "plaintext"
		}
	}
	switch tlsMode {
	case "plaintext":
		out.TLS = simulation.Plaintext
	case "tls":
		out.TLS = simulation.TLS
	case "mtls":
		out.TLS = simulation.MTLS
	default:
		return out, fmt.Errorf("tls %q is not plaintext, tls or mtls", tlsMode)
	}
	if out.Sni == "" && out.TLS != simulation.Plaintext {
		out.Sni = call.Host
	}
	if len(call.Headers) > 0 {
		out.Headers = http.Header{}
		for k, v := range call.Headers {
			out.Headers.Set(k, v)
		}
	}
	out.Address = call.Address
	if out.Address == "" {
		switch mode {
		case "outbound":
			out.Address = c.addressOf(pc.proxy, call.Host)
		default:
			out.Address = pc.pod.Status.PodIP
		}
	}
	if mode == "gateway" {
		out.Port = c.targetPort(pc.pod, call.Port)
	}
	return out, nil
}

// addressOf is the address a sidecar's application connects to for `hostname`: the VIP of the service
// as the proxy sees it, or 0.0.0.0 for one without a VIP (its listener is the wildcard one); for a
// service out of the proxy's sight, the Kubernetes Service's cluster IP DNS would answer; else an address
// no listener has.
func (c *cluster) addressOf(proxy *model.Proxy, hostname string) string {
	if svc := c.server.PushContext().ServiceForHostname(proxy, host.Name(hostname)); svc != nil {
		return svc.GetAddressForProxy(proxy)
	}
	for _, svc := range c.services {
		if hostname == svc.Name+"."+svc.Namespace+".svc.cluster.local" && svc.Spec.ClusterIP != "" {
			return svc.Spec.ClusterIP
		}
	}
	return "1.3.3.7"
}

// targetPort maps a Service port of a gateway's Service to the port its pod listens on, as kube-proxy does.
func (c *cluster) targetPort(pod *corev1.Pod, port int) int {
	for _, svc := range c.services {
		if svc.Namespace != pod.Namespace || len(svc.Spec.Selector) == 0 || !selects(svc.Spec.Selector, pod.Labels) {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if int(p.Port) == port && p.TargetPort.IntValue() > 0 {
				return p.TargetPort.IntValue()
			}
		}
	}
	return port
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func httpManager(fc *listenerpb.FilterChain) *hcmpb.HttpConnectionManager {
	for _, f := range fc.Filters {
		if f.Name == wellknown.HTTPConnectionManager {
			h := &hcmpb.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(h); err == nil {
				return h
			}
		}
	}
	return nil
}

func filterNames(fc *listenerpb.FilterChain) []string {
	var out []string
	for _, f := range fc.Filters {
		out = append(out, f.Name)
		if f.Name == wellknown.HTTPConnectionManager {
			if h := httpManager(fc); h != nil {
				for _, hf := range h.HttpFilters {
					out = append(out, "  "+hf.Name)
				}
			}
		}
	}
	return out
}

// chainNames gives every filter chain a unique name while the simulation runs (Istio leaves some
// unnamed), so the matched chain can be found again; restore puts the names back.
type chainNames struct {
	original map[*listenerpb.FilterChain]string
	byName   map[string]*listenerpb.FilterChain
}

func nameChainsUniquely(listeners []*listenerpb.Listener) *chainNames {
	n := &chainNames{original: map[*listenerpb.FilterChain]string{}, byName: map[string]*listenerpb.FilterChain{}}
	i := 0
	add := func(fc *listenerpb.FilterChain) {
		if fc == nil {
			return
		}
		n.original[fc] = fc.Name
		fc.Name = fmt.Sprintf("#%d", i)
		n.byName[fc.Name] = fc
		i++
	}
	for _, l := range listeners {
		for _, fc := range l.FilterChains {
			add(fc)
		}
		add(l.DefaultFilterChain)
	}
	return n
}

func (n *chainNames) chain(name string) *listenerpb.FilterChain { return n.byName[name] }

func (n *chainNames) restore() {
	for fc, name := range n.original {
		fc.Name = name
	}
	n.original = map[*listenerpb.FilterChain]string{}
}
