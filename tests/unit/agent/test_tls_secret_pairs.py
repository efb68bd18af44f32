"""A kubernetes.io/tls Secret gives a certificate pair only when it holds one that Envoy can serve: a Secret
of another type, with a key missing, with PEM that does not parse or a key that is not the certificate's is
invalid (a Gateway listener naming it is not ResolvedRefs), never handed to Envoy."""

from __future__ import annotations

import asyncio
import base64

import pytest

from meshplane.agent.kube.client import ResourceType
from meshplane.agent.kube.tls_secrets import TLS_TYPE, InvalidTLSSecret, TLSPair, TLSSecretReader, tls_pair
from meshplane.security.ca import create_ca, issue_server_certificate

CA = create_ca()
PAIR = issue_server_certificate(CA, ["shop.example.com"])
OTHER = issue_server_certificate(CA, ["other.example.com"])


def secret(certificate: bytes | None, key: bytes | None, kind: str = TLS_TYPE) -> dict:
    held = (("tls.crt", certificate), ("tls.key", key))
    return {"type": kind, "data": {name: base64.b64encode(value).decode() for name, value in held if value}}


def test_a_complete_tls_secret_gives_its_certificate_and_key() -> None:
    assert tls_pair(secret(PAIR.certificate_pem(), PAIR.key_pem())) == TLSPair(
        PAIR.certificate_pem().decode(), PAIR.key_pem().decode()
    )


@pytest.mark.parametrize(
    ("held", "why"),
    [
        (secret(PAIR.certificate_pem(), PAIR.key_pem(), kind="Opaque"), "is of type Opaque"),
        (secret(PAIR.certificate_pem(), None), "has no tls.key"),
        (secret(None, PAIR.key_pem()), "has no tls.crt"),
        (secret(b"Hello world\n", b"Hello world\n"), "tls.crt is not a PEM certificate chain"),
        (secret(PAIR.certificate_pem(), b"Hello world\n"), "tls.key is not an unencrypted PEM private key"),
        (secret(PAIR.certificate_pem(), OTHER.key_pem()), "tls.key is not the key of the certificate in tls.crt"),
        ({"type": TLS_TYPE, "data": {"tls.crt": "%%%", "tls.key": "%%%"}}, "tls.crt is not base64"),
    ],
    ids=["another type", "no key", "no certificate", "not PEM", "key not PEM", "key not matching", "not base64"],
)
def test_a_tls_secret_that_holds_no_servable_pair_is_invalid_and_says_why(held: dict, why: str) -> None:
    with pytest.raises(InvalidTLSSecret) as invalid:
        tls_pair(held)
    assert str(invalid.value) == why


class HeldSecrets:
    """The cluster's Secrets by (namespace, name), as the reader's client gets them."""

    def __init__(self, secrets: dict[tuple[str, str], dict]) -> None:
        self.secrets = secrets

    async def get(self, kind: ResourceType, namespace: str, name: str) -> dict | None:
        return self.secrets.get((namespace, name))


def test_the_reader_serves_no_pair_for_a_malformed_secret_and_tells_it_from_a_missing_one() -> None:
    malformed = secret(b"Hello world\n", b"Hello world\n")
    client = HeldSecrets(
        {("infra", "malformed"): malformed, ("infra", "good"): secret(PAIR.certificate_pem(), PAIR.key_pem())}
    )
    reader = TLSSecretReader(client, on_change=lambda: asyncio.sleep(0))  # type: ignore[arg-type]
    reader.want([("infra", "malformed"), ("infra", "good"), ("infra", "gone")])

    assert asyncio.run(asyncio.wait_for(reader.read(), 5)) is True

    assert set(reader.pairs) == {("infra", "good")}
    assert reader.problems == {
        ("infra", "malformed"): "is not a valid kubernetes.io/tls Secret: tls.crt is not a PEM certificate chain",
        ("infra", "gone"): "is not there",
    }


async def test_a_wanted_secret_made_after_the_first_read_is_served_soon_not_a_whole_interval_later() -> None:
    client = HeldSecrets({})
    changed = asyncio.Event()

    async def on_change() -> None:
        changed.set()

    reader = TLSSecretReader(client, on_change=on_change, interval=60.0)  # type: ignore[arg-type]
    reader.want([("infra", "late")])
    running = asyncio.create_task(reader.run())
    try:
        async with asyncio.timeout(5):
            await changed.wait()  # the first read: the Secret is not there
            assert reader.problems == {("infra", "late"): "is not there"}
            changed.clear()
            client.secrets[("infra", "late")] = secret(PAIR.certificate_pem(), PAIR.key_pem())
            await changed.wait()  # the old reader waited out its 60 s interval
        assert set(reader.pairs) == {("infra", "late")}
    finally:
        running.cancel()


async def test_a_secret_missing_for_long_is_still_read_within_the_retry_cap_once_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("meshplane.lifecycle.random.uniform", lambda low, high: high)  # every delay its longest
    client = HeldSecrets({})
    changed = asyncio.Event()

    async def on_change() -> None:
        changed.set()

    reader = TLSSecretReader(client, on_change=on_change, interval=60.0, retry_from=0.05, retry_cap=0.2)  # type: ignore[arg-type]
    reader.want([("infra", "late")])
    running = asyncio.create_task(reader.run())
    try:
        await asyncio.sleep(1.6)  # backing off up to the interval, the next read would be 1.6 s away
        changed.clear()
        client.secrets[("infra", "late")] = secret(PAIR.certificate_pem(), PAIR.key_pem())
        async with asyncio.timeout(0.6):
            await changed.wait()
        assert set(reader.pairs) == {("infra", "late")}
    finally:
        running.cancel()
