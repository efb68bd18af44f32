"""Every cluster's istiod signs with its own intermediate of one root, so workloads of any two clusters
trust each other: the chains they issue end at the same root."""

from __future__ import annotations

import grpc
import pytest
from cryptography import x509

from meshplane_testing.istio import CA_AUDIENCE, ISTIOD_HOST, Fleet
from meshplane_testing.istio_certificates import request_workload_certificate

pytestmark = pytest.mark.timeout(300)


def _signed_by(certificate: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, x509.InvalidSignature):
        return False
    return True


def test_two_clusters_istiods_issue_certificates_that_chain_to_the_one_root(fleet: Fleet) -> None:
    root = fleet.root.root.certificate
    intermediates = []
    for cluster in fleet.clusters[:2]:
        chain = cluster.workload_certificate("shop", "web")
        leaf, intermediate = chain[0], chain[1]
        spiffe = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert spiffe.get_values_for_type(x509.UniformResourceIdentifier) == [
            f"spiffe://{cluster.istiod.trust_domain}/ns/shop/sa/web"
        ]
        assert _signed_by(leaf, intermediate)
        assert _signed_by(intermediate, root)
        assert chain[-1] == root
        intermediates.append(intermediate)
    assert intermediates[0] != intermediates[1]


def test_a_clusters_istiod_refuses_a_token_of_another_clusters_api_server(fleet: Fleet) -> None:
    a, b = fleet.clusters[:2]
    foreign = b.kube.service_account_token("shop", "web", audiences=[CA_AUDIENCE])
    with pytest.raises(grpc.RpcError) as refused:
        request_workload_certificate(
            f"127.0.0.1:{a.istiod.secure_grpc_port}",
            fleet.root.root_pem(),
            ISTIOD_HOST,
            foreign,
            a.name,
            f"spiffe://{a.istiod.trust_domain}/ns/shop/sa/web",
        )
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
