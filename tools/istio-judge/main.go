// istio-judge asks istiod's own configuration generator what it makes of a cluster's objects, and what
// happens to given calls: the listener, filter chain, route and cluster each proxy would use, and what
// its RBAC filters decide. Input is JSON on stdin (or the file named as the argument); output is JSON.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config/mesh"
	istiolog "istio.io/istio/pkg/log"
)

// Output is the judge's answer for one Input.
type Output struct {
	Validation []Finding `json:"validation"`
	Ignored    []string  `json:"ignored"`
	Results    []Result  `json:"results"`
	// SetupMillis is how long istiod took to read the objects; CallMillis the time spent judging calls.
	SetupMillis int64 `json:"setupMillis"`
	CallMillis  int64 `json:"callMillis"`
}

func main() {
	if err := quietLogs(); err != nil {
		fail(err)
	}
	var in io.Reader = os.Stdin
	if len(os.Args) > 1 {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fail(err)
		}
		defer f.Close()
		in = f
	}
	var input Input
	if err := json.NewDecoder(in).Decode(&input); err != nil {
		fail(fmt.Errorf("input: %v", err))
	}
	out, err := judge(input)
	if err != nil {
		fail(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
}

func judge(input Input) (Output, error) {
	parsed, err := parseObjects(input.Objects)
	if err != nil {
		return Output{}, err
	}
	meshConfig, err := mesh.ApplyMeshConfigDefaults(input.MeshConfig)
	if err != nil {
		return Output{}, fmt.Errorf("meshConfig: %v", err)
	}
	t := &failer{}
	defer t.Close()
	started := time.Now()
	var server *xds.FakeDiscoveryServer
	if err := t.run(func() {
		server = xds.NewFakeDiscoveryServer(t, xds.FakeOptions{
			Configs:           parsed.configs,
			KubernetesObjects: parsed.kube,
			MeshConfig:        meshConfig,
		})
	}); err != nil {
		return Output{}, fmt.Errorf("istiod could not start on these objects: %v", err)
	}
	setup := time.Since(started)
	started = time.Now()
	env := newCluster(server, parsed.kube)
	results := make([]Result, 0, len(input.Calls))
	for _, call := range input.Calls {
		results = append(results, env.judgeGuarded(t, call))
	}
	return Output{
		Validation:  orEmpty(parsed.validation),
		Ignored:     orEmpty(parsed.ignored),
		Results:     results,
		SetupMillis: setup.Milliseconds(),
		CallMillis:  time.Since(started).Milliseconds(),
	}, nil
}

// quietLogs sends istiod's logs to stderr (stdout carries the answer), errors only.
func quietLogs() error {
	opts := istiolog.DefaultOptions()
	opts.OutputPaths = []string{"stderr"}
	opts.ErrorOutputPaths = []string{"stderr"}
	for name := range istiolog.Scopes() {
		opts.SetDefaultOutputLevel(name, istiolog.ErrorLevel)
	}
	opts.SetDefaultOutputLevel(istiolog.DefaultScopeName, istiolog.ErrorLevel)
	return istiolog.Configure(opts)
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "istio-judge:", err)
	os.Exit(1)
}
