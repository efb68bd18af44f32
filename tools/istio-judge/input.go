package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/collections"
	"istio.io/istio/pkg/config/schema/resource"
	kubelib "istio.io/istio/pkg/kube"
)

// Input is what a scenario gives the judge: the objects of one cluster, its mesh config, and the calls to judge.
type Input struct {
	// MeshConfig is istiod's mesh config as YAML (e.g. "trustDomain: cluster.local"); defaults apply to the rest.
	MeshConfig string            `json:"meshConfig"`
	Objects    []json.RawMessage `json:"objects"`
	Calls      []Call            `json:"calls"`
}

// Call is one connection or request, as seen by one proxy.
type Call struct {
	Name string `json:"name"`
	// From names the pod whose proxy handles the call: "namespace/name". Router marks a gateway's pod.
	From   string `json:"from"`
	Router bool   `json:"router"`
	// Mode: "outbound" (the sidecar's app calls out), "inbound" (a peer calls the sidecar's app), or
	// "gateway" (a client calls the gateway); the default follows Router.
	Mode     string `json:"mode"`
	Host     string `json:"host"`
	Address  string `json:"address"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"` // HTTP, HTTP2, TLS (opaque TLS), TCP
	// TLS is the connection's own TLS: "plaintext", "tls" or "mtls" (Istio mTLS); derived when empty.
	TLS     string            `json:"tls"`
	SNI     string            `json:"sni"`
	Path    string            `json:"path"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
	// Peer is the caller's mTLS identity (e.g. "cluster.local/ns/shop/sa/cart").
	Peer string `json:"peer"`
	// SourceIP is the direct peer's address; RemoteIP the original client's (defaults to SourceIP).
	SourceIP string `json:"sourceIp"`
	RemoteIP string `json:"remoteIp"`
	JWT      *JWT   `json:"jwt"`
}

// JWT is a token the caller presents, taken as validly signed by its issuer.
type JWT struct {
	Issuer  string         `json:"issuer"`
	Subject string         `json:"subject"`
	Claims  map[string]any `json:"claims"`
}

// Finding is istiod's validation verdict on one object, as its admission webhook would give it.
type Finding struct {
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Errors    []string `json:"errors,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

type parsedInput struct {
	configs    []config.Config
	kube       []runtime.Object
	validation []Finding
	ignored    []string
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// parseObjects splits the objects into Istio config (validated the webhook's way) and Kubernetes objects
// for the service registry; kinds istiod does not read are listed as ignored.
func parseObjects(objects []json.RawMessage) (parsedInput, error) {
	var out parsedInput
	schemas := collections.PilotGatewayAPI()
	decode := kubelib.IstioCodec.UniversalDeserializer().Decode
	for i, raw := range objects {
		var meta typeMeta
		if err := json.Unmarshal(raw, &meta); err != nil {
			return out, fmt.Errorf("objects[%d]: %v", i, err)
		}
		group, version, _ := strings.Cut(meta.APIVersion, "/")
		if version == "" {
			group, version = "", group
		}
		key := fmt.Sprintf("%s %s/%s", meta.Kind, meta.Metadata.Namespace, meta.Metadata.Name)
		gvk := config.GroupVersionKind{Group: group, Version: version, Kind: meta.Kind}
		if s, ok := schemas.FindByGroupKind(gvk); ok && group != "" {
			cfg, finding, err := istioConfig(s, raw)
			if err != nil {
				return out, fmt.Errorf("objects[%d] (%s): %v", i, key, err)
			}
			out.configs = append(out.configs, cfg)
			if len(finding.Errors)+len(finding.Warnings) > 0 {
				out.validation = append(out.validation, finding)
			}
			continue
		}
		obj, _, err := decode(raw, nil, nil)
		if err != nil {
			out.ignored = append(out.ignored, key)
			continue
		}
		out.kube = append(out.kube, obj)
	}
	return out, nil
}

// istioConfig converts one Istio object as the webhook does, and validates it with the schema's validation.
func istioConfig(s resource.Schema, raw json.RawMessage) (config.Config, Finding, error) {
	var obj crd.IstioKind
	if err := json.Unmarshal(raw, &obj); err != nil {
		return config.Config{}, Finding{}, err
	}
	cfg, err := crd.ConvertObject(s, &obj, "cluster.local")
	if err != nil {
		return config.Config{}, Finding{}, err
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	finding := Finding{Kind: s.Kind(), Namespace: cfg.Namespace, Name: cfg.Name}
	warnings, verr := s.ValidateConfig(*cfg)
	finding.Errors = errorList(verr)
	finding.Warnings = errorList(warnings)
	return *cfg, finding, nil
}

// errorList flattens a (multi)error into its messages.
func errorList(err error) []string {
	if err == nil {
		return nil
	}
	if multi, ok := err.(interface{ WrappedErrors() []error }); ok {
		var out []string
		for _, e := range multi.WrappedErrors() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}
