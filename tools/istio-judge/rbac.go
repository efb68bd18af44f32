package main

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"sort"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	httprbac "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	netrbac "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"istio.io/istio/pilot/pkg/simulation"
)

// Decision is what one RBAC filter of the matched chain decides.
type Decision struct {
	Filter string `json:"filter"`
	// Action is the filter's action (ALLOW, DENY, LOG); "" for a filter with shadow rules only.
	Action   string   `json:"action"`
	Policies []string `json:"policies"`
	Matched  []string `json:"matched"`
	Allowed  bool     `json:"allowed"`
	Reason   string   `json:"reason"`
}

// request is what an RBAC filter can see of a connection or request.
type request struct {
	http       bool
	destIP     string
	destPort   int
	sni        string
	principal  string // the peer certificate's URI SAN; "" without mTLS
	sourceIP   string
	remoteIP   string
	headers    map[string]string // lower-case names, with :method, :path, :authority
	path       string            // as Envoy matches it: normalized the way the HCM is configured
	metadata   map[string]any    // dynamic metadata by filter: the JWT filter's payload, once it verified a token
	unreadable []string
}

func requestOf(call Call, sim simulation.Call, hcm *hcmpb.HttpConnectionManager) *request {
	sim = sim.FillDefaults()
	r := &request{
		http:     hcm != nil,
		destIP:   sim.Address,
		destPort: sim.Port,
		sni:      sim.Sni,
		sourceIP: call.SourceIP,
		remoteIP: call.RemoteIP,
		headers:  map[string]string{},
	}
	if sim.TLS == simulation.MTLS && call.Peer != "" {
		r.principal = call.Peer
		if !strings.HasPrefix(r.principal, "spiffe://") {
			r.principal = "spiffe://" + r.principal
		}
	}
	if r.sourceIP == "" {
		r.sourceIP = "10.0.0.1"
	}
	if r.remoteIP == "" {
		r.remoteIP = r.sourceIP
	}
	if hcm == nil {
		return r
	}
	for k, v := range call.Headers {
		r.headers[strings.ToLower(k)] = v
	}
	method := call.Method
	if method == "" {
		method = "GET"
	}
	r.headers[":method"] = method
	r.headers[":path"] = sim.Path
	r.headers[":authority"] = call.Host
	r.headers["host"] = call.Host
	r.path = normalizedPath(strings.SplitN(sim.Path, "?", 2)[0], hcm)
	if call.JWT != nil && verifiesIssuer(hcm, call.JWT.Issuer) {
		payload := map[string]any{"iss": call.JWT.Issuer, "sub": call.JWT.Subject}
		for k, v := range call.JWT.Claims {
			payload[k] = v
		}
		r.metadata = map[string]any{jwtFilter: map[string]any{"payload": payload}}
	}
	return r
}

// normalizedPath applies the HCM's path normalization (RFC 3986 dot segments, merged slashes).
func normalizedPath(p string, hcm *hcmpb.HttpConnectionManager) string {
	if hcm.GetMergeSlashes() {
		for strings.Contains(p, "//") {
			p = strings.ReplaceAll(p, "//", "/")
		}
	}
	if hcm.GetNormalizePath().GetValue() && p != "" {
		trailing := strings.HasSuffix(p, "/")
		p = path.Clean(p)
		if trailing && p != "/" {
			p += "/"
		}
	}
	return p
}

const jwtFilter = "envoy.filters.http.jwt_authn"

// verifiesIssuer says whether the chain has a JWT filter with a provider for `issuer`: only then is
// the token's payload in the metadata the RBAC filters match request.auth.* against.
func verifiesIssuer(hcm *hcmpb.HttpConnectionManager, issuer string) bool {
	for _, f := range hcm.HttpFilters {
		if f.Name != jwtFilter {
			continue
		}
		cfg := &jwtpb.JwtAuthentication{}
		if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
			continue
		}
		for _, p := range cfg.Providers {
			if p.Issuer == issuer {
				return true
			}
		}
	}
	return false
}

// evaluateChain runs the chain's RBAC filters in order: network filters, then the HCM's HTTP filters.
func evaluateChain(fc *listenerpb.FilterChain, req *request) []Decision {
	out := []Decision{}
	for _, f := range fc.Filters {
		if strings.HasSuffix(f.GetTypedConfig().GetTypeUrl(), "envoy.extensions.filters.network.rbac.v3.RBAC") {
			cfg := &netrbac.RBAC{}
			if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
				out = append(out, unreadable(f.Name, err))
				continue
			}
			out = append(out, evaluate(f.Name, cfg.Rules, req))
		}
	}
	if hcm := httpManager(fc); hcm != nil {
		for _, f := range hcm.HttpFilters {
			if strings.HasSuffix(f.GetTypedConfig().GetTypeUrl(), "envoy.extensions.filters.http.rbac.v3.RBAC") {
				cfg := &httprbac.RBAC{}
				if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
					out = append(out, unreadable(f.Name, err))
					continue
				}
				out = append(out, evaluate(f.Name, cfg.Rules, req))
			}
		}
	}
	return out
}

func unreadable(name string, err error) Decision {
	return Decision{Filter: name, Policies: []string{}, Matched: []string{}, Reason: "unreadable: " + err.Error()}
}

func evaluate(name string, rules *rbacpb.RBAC, req *request) Decision {
	d := Decision{Filter: name, Policies: []string{}, Matched: []string{}, Allowed: true}
	if rules == nil {
		d.Reason = "shadow rules only"
		return d
	}
	d.Action = rules.Action.String()
	for policyName := range rules.Policies {
		d.Policies = append(d.Policies, policyName)
	}
	sort.Strings(d.Policies)
	for _, policyName := range d.Policies {
		p := rules.Policies[policyName]
		if anyPermission(p.Permissions, req) && anyPrincipal(p.Principals, req) {
			d.Matched = append(d.Matched, policyName)
		}
	}
	switch rules.Action {
	case rbacpb.RBAC_ALLOW:
		d.Allowed = len(d.Matched) > 0
		if d.Allowed {
			d.Reason = "allowed by " + d.Matched[0]
		} else if len(d.Policies) == 0 {
			d.Reason = "ALLOW filter with no policies: denies everything"
		} else {
			d.Reason = "no ALLOW policy matched (" + strings.Join(d.Policies, ", ") + ")"
		}
	case rbacpb.RBAC_DENY:
		d.Allowed = len(d.Matched) == 0
		if d.Allowed {
			d.Reason = "no DENY policy matched"
		} else {
			d.Reason = "denied by " + d.Matched[0]
		}
	default:
		d.Reason = "action " + d.Action + " does not decide"
	}
	if len(req.unreadable) > 0 {
		d.Reason += "; not evaluated (counted as no match): " + strings.Join(req.unreadable, ", ")
	}
	return d
}

func anyPermission(ps []*rbacpb.Permission, req *request) bool {
	for _, p := range ps {
		if permission(p, req) {
			return true
		}
	}
	return false
}

func anyPrincipal(ps []*rbacpb.Principal, req *request) bool {
	for _, p := range ps {
		if principal(p, req) {
			return true
		}
	}
	return false
}

func permission(p *rbacpb.Permission, req *request) bool {
	switch r := p.Rule.(type) {
	case *rbacpb.Permission_Any:
		return r.Any
	case *rbacpb.Permission_AndRules:
		for _, sub := range r.AndRules.Rules {
			if !permission(sub, req) {
				return false
			}
		}
		return true
	case *rbacpb.Permission_OrRules:
		return anyPermission(r.OrRules.Rules, req)
	case *rbacpb.Permission_NotRule:
		return !permission(r.NotRule, req)
	case *rbacpb.Permission_Header:
		return header(r.Header, req)
	case *rbacpb.Permission_UrlPath:
		return req.http && stringMatch(r.UrlPath.GetPath(), req.path)
	case *rbacpb.Permission_DestinationIp:
		return cidrContains(r.DestinationIp, req.destIP)
	case *rbacpb.Permission_DestinationPort:
		return int(r.DestinationPort) == req.destPort
	case *rbacpb.Permission_DestinationPortRange:
		return int32(req.destPort) >= r.DestinationPortRange.Start && int32(req.destPort) < r.DestinationPortRange.End
	case *rbacpb.Permission_RequestedServerName:
		return stringMatch(r.RequestedServerName, req.sni)
	case *rbacpb.Permission_Metadata:
		return metadata(r.Metadata, req)
	}
	req.unreadable = append(req.unreadable, fmt.Sprintf("permission %T", p.Rule))
	return false
}

func principal(p *rbacpb.Principal, req *request) bool {
	switch r := p.Identifier.(type) {
	case *rbacpb.Principal_Any:
		return r.Any
	case *rbacpb.Principal_AndIds:
		for _, sub := range r.AndIds.Ids {
			if !principal(sub, req) {
				return false
			}
		}
		return true
	case *rbacpb.Principal_OrIds:
		return anyPrincipal(r.OrIds.Ids, req)
	case *rbacpb.Principal_NotId:
		return !principal(r.NotId, req)
	case *rbacpb.Principal_Authenticated_:
		if req.principal == "" {
			return false
		}
		return r.Authenticated.PrincipalName == nil || stringMatch(r.Authenticated.PrincipalName, req.principal)
	case *rbacpb.Principal_FilterState:
		if r.FilterState.Key != "io.istio.peer_principal" {
			req.unreadable = append(req.unreadable, "filter state "+r.FilterState.Key)
			return false
		}
		return req.principal != "" && stringMatch(r.FilterState.GetStringMatch(), req.principal)
	case *rbacpb.Principal_DirectRemoteIp:
		return cidrContains(r.DirectRemoteIp, req.sourceIP)
	case *rbacpb.Principal_SourceIp:
		return cidrContains(r.SourceIp, req.sourceIP)
	case *rbacpb.Principal_RemoteIp:
		return cidrContains(r.RemoteIp, req.remoteIP)
	case *rbacpb.Principal_Header:
		return header(r.Header, req)
	case *rbacpb.Principal_UrlPath:
		return req.http && stringMatch(r.UrlPath.GetPath(), req.path)
	case *rbacpb.Principal_Metadata:
		return metadata(r.Metadata, req)
	}
	req.unreadable = append(req.unreadable, fmt.Sprintf("principal %T", p.Identifier))
	return false
}

func header(h *routepb.HeaderMatcher, req *request) bool {
	if !req.http {
		return false
	}
	value, present := req.headers[strings.ToLower(h.Name)]
	var matched bool
	switch m := h.HeaderMatchSpecifier.(type) {
	case *routepb.HeaderMatcher_PresentMatch:
		matched = present == m.PresentMatch
	case *routepb.HeaderMatcher_StringMatch:
		matched = present && stringMatch(m.StringMatch, value)
	case *routepb.HeaderMatcher_ExactMatch:
		matched = present && value == m.ExactMatch
	case *routepb.HeaderMatcher_PrefixMatch:
		matched = present && strings.HasPrefix(value, m.PrefixMatch)
	case *routepb.HeaderMatcher_SuffixMatch:
		matched = present && strings.HasSuffix(value, m.SuffixMatch)
	case *routepb.HeaderMatcher_ContainsMatch:
		matched = present && strings.Contains(value, m.ContainsMatch)
	case *routepb.HeaderMatcher_SafeRegexMatch:
		matched = present && fullMatch(m.SafeRegexMatch.GetRegex(), value)
	case nil:
		matched = present
	default:
		req.unreadable = append(req.unreadable, fmt.Sprintf("header matcher %T", h.HeaderMatchSpecifier))
		return false
	}
	if !present && h.TreatMissingHeaderAsEmpty {
		matched = stringMatch(h.GetStringMatch(), "")
	}
	return matched != h.InvertMatch
}

func stringMatch(m *matcherpb.StringMatcher, value string) bool {
	if m == nil {
		return false
	}
	v := value
	fold := func(s string) string {
		if m.IgnoreCase {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.MatchPattern.(type) {
	case *matcherpb.StringMatcher_Exact:
		return fold(v) == fold(p.Exact)
	case *matcherpb.StringMatcher_Prefix:
		return strings.HasPrefix(fold(v), fold(p.Prefix))
	case *matcherpb.StringMatcher_Suffix:
		return strings.HasSuffix(fold(v), fold(p.Suffix))
	case *matcherpb.StringMatcher_Contains:
		return strings.Contains(fold(v), fold(p.Contains))
	case *matcherpb.StringMatcher_SafeRegex:
		return fullMatch(p.SafeRegex.GetRegex(), v)
	}
	return false
}

// fullMatch is RE2 matching the whole value, as Envoy's safe_regex does.
func fullMatch(expr, value string) bool {
	re, err := regexp.Compile("^(?:" + expr + ")$")
	return err == nil && re.MatchString(value)
}

func cidrContains(c *corepb.CidrRange, ip string) bool {
	addr, err := netip.ParseAddr(ip)
	if err != nil || c == nil {
		return false
	}
	prefix, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", c.AddressPrefix, c.GetPrefixLen().GetValue()))
	return err == nil && prefix.Contains(addr)
}

// metadata matches a filter's dynamic metadata: request.auth.* are the JWT filter's, set only where it
// verified the caller's token.
func metadata(m *matcherpb.MetadataMatcher, req *request) bool {
	if m.Filter != jwtFilter {
		req.unreadable = append(req.unreadable, "metadata of "+m.Filter)
		return false
	}
	var value any = req.metadata[m.Filter]
	for _, seg := range m.Path {
		obj, ok := value.(map[string]any)
		if !ok {
			value = nil
			break
		}
		value, ok = obj[seg.GetKey()]
		if !ok {
			value = nil
			break
		}
	}
	return valueMatch(m.Value, value) != m.Invert
}

func valueMatch(m *matcherpb.ValueMatcher, value any) bool {
	switch p := m.MatchPattern.(type) {
	case *matcherpb.ValueMatcher_PresentMatch:
		return (value != nil) == p.PresentMatch
	case *matcherpb.ValueMatcher_NullMatch_:
		return value == nil
	case *matcherpb.ValueMatcher_StringMatch:
		s, ok := value.(string)
		return ok && stringMatch(p.StringMatch, s)
	case *matcherpb.ValueMatcher_BoolMatch:
		b, ok := value.(bool)
		return ok && b == p.BoolMatch
	case *matcherpb.ValueMatcher_ListMatch:
		for _, item := range asList(value) {
			if valueMatch(p.ListMatch.GetOneOf(), item) {
				return true
			}
		}
		return false
	case *matcherpb.ValueMatcher_OrMatch:
		for _, sub := range p.OrMatch.ValueMatchers {
			if valueMatch(sub, value) {
				return true
			}
		}
		return false
	}
	return false
}

// asList reads a claim as Istio's authn filter stores it: a list, a single string becoming a list of one.
func asList(value any) []any {
	switch v := value.(type) {
	case []any:
		return v
	case nil:
		return nil
	case *structpb.Value:
		return asList(v.AsInterface())
	default:
		return []any{v}
	}
}
