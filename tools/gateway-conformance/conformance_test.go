// Package gatewayconformance runs the Gateway API conformance suite against meshplane's GatewayClass.
//
// Built with `go test -c` by scripts/build-gateway-api and run by scripts/run-gateway-conformance, which
// brings up the cluster, the control plane, the agent and Envoy first. The suite's own flags
// (-gateway-class, -conformance-profiles, -supported-features, -report-output, -run-test, ...) override
// the defaults set here: GatewayClass `meshplane`, the GATEWAY-HTTP and GATEWAY-GRPC profiles, and the
// implementation named in the report.
package gatewayconformance

import (
	"flag"
	"testing"

	"sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

const gatewayClass = "meshplane"

// The implementation the report names, where the suite's -organization, -project, -url, -version and
// -contact flags leave it empty (the report is refused without each of them).
var defaultImplementation = confv1.Implementation{
	Organization: "meshplane",
	Project:      "meshplane",
	URL:          "https://meshplane.io",
	Version:      "dev",
	Contact:      []string{"@meshplane/maintainers"},
}

func TestGatewayAPIConformance(t *testing.T) {
	options := conformance.DefaultOptions(t)
	if !explicitlySet("gateway-class") {
		options.GatewayClassName = gatewayClass
	}
	if !explicitlySet("conformance-profiles") {
		options.ConformanceProfiles = []suite.ConformanceProfileName{
			suite.GatewayHTTPConformanceProfileName,
			suite.GatewayGRPCConformanceProfileName,
		}
	}
	fillImplementation(&options.Implementation)
	conformance.RunConformanceWithOptions(t, options)
}

// explicitlySet tells a flag given on the command line from one left at the suite's default.
func explicitlySet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func fillImplementation(implementation *confv1.Implementation) {
	fill := func(field *string, value string) {
		if *field == "" {
			*field = value
		}
	}
	fill(&implementation.Organization, defaultImplementation.Organization)
	fill(&implementation.Project, defaultImplementation.Project)
	fill(&implementation.URL, defaultImplementation.URL)
	fill(&implementation.Version, defaultImplementation.Version)
	if len(implementation.Contact) == 0 {
		implementation.Contact = defaultImplementation.Contact
	}
}
