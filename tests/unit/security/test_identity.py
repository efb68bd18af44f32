"""A call's cluster identity comes from its verified certificate; only plaintext (--insecure) trusts the claim."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from meshplane.security.identity import authorize_cluster, is_plaintext, peer_cluster


@dataclass
class FakeContext:
    properties: dict[str, list[bytes]] = field(default_factory=dict)

    def auth_context(self) -> dict[str, list[bytes]]:
        return self.properties


def tls_peer(*sans: str) -> FakeContext:
    return FakeContext(
        {"transport_security_type": [b"ssl"], "x509_subject_alternative_name": [s.encode() for s in sans]}
    )


PLAINTEXT = FakeContext({"transport_security_type": [b"insecure"], "security_level": [b"TSI_SECURITY_NONE"]})


def test_a_certificate_for_the_cluster_may_act_for_it() -> None:
    context = tls_peer("spiffe://meshplane/cluster/edge-1")

    authorize_cluster(context, "edge-1")  # type: ignore[arg-type]

    assert peer_cluster(context) == "edge-1"  # type: ignore[arg-type]


def test_a_certificate_for_another_cluster_is_refused_with_both_names() -> None:
    with pytest.raises(PermissionError, match="certificate is for cluster 'edge-1', not 'edge-2'"):
        authorize_cluster(tls_peer("spiffe://meshplane/cluster/edge-1"), "edge-2")  # type: ignore[arg-type]


@pytest.mark.parametrize("sans", [(), ("localhost", "127.0.0.1"), ("spiffe://meshplane/server",)])
def test_a_certificate_that_names_no_cluster_acts_for_none(sans: tuple[str, ...]) -> None:
    with pytest.raises(PermissionError, match="names no cluster"):
        authorize_cluster(tls_peer(*sans), "edge-1")  # type: ignore[arg-type]


def test_a_plaintext_caller_is_taken_at_its_word() -> None:
    assert is_plaintext(PLAINTEXT)  # type: ignore[arg-type]
    authorize_cluster(PLAINTEXT, "anything")  # type: ignore[arg-type]
    assert peer_cluster(PLAINTEXT) is None  # type: ignore[arg-type]


def test_a_context_without_transport_information_counts_as_plaintext() -> None:
    assert is_plaintext(FakeContext())  # type: ignore[arg-type]
