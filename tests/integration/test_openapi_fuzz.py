"""The north API against its own OpenAPI document: generated requests to a real server, signed in as its admin
through the document's bearer scheme, must never meet a 5xx, and every answer (status, content type, headers,
body) must be one the document describes; requests the document calls invalid must be refused, and a request
without a valid token must be refused whatever it asks.

Positive data acceptance is not checked: the document cannot say everything that makes a request acceptable
(a name that is a DNS label, a label selector's grammar, a continue token the server issued, an object that
another must exist for), so schema-valid requests are refused with 400, 404 or 422 for good reasons.
No stateful run either: the document has no links, the ones schemathesis infers from path parameters mostly
join unrelated kinds, and since generated objects are rarely valid its chains seldom get past their first step.
A few shared names (`aimed`) make writes and reads meet the same objects instead, and deterministically.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import CoverageScenario, coverage_scenario
from schemathesis.config import SchemathesisConfig

from meshplane.model.registry import REGISTRY
from meshplane_testing.meshplane import ServerProcess, run_server

pytestmark = pytest.mark.timeout(90)

TAGS = sorted(
    {info.kind for info in REGISTRY if info.exposed} | {"Health", "Tokens", "Cluster", "Credentials", "Watch", "Audit"}
)
"""The tags the operations are grouped by, one test each: the kinds' routes and the other routers'."""
EXAMPLES = settings(
    max_examples=20,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
"""Bounded and seeded: the same requests in the same order on every run."""
PROTOCOL = {
    CoverageScenario.UNSPECIFIED_HTTP_METHOD,
    CoverageScenario.UNSUPPORTED_CONTENT_TYPE,
    CoverageScenario.MALFORMED_CONTENT_TYPE,
    CoverageScenario.MISSING_PARAMETER,
}
"""The deterministic cases random generation does not make: a method the path lacks, a body in another media
type or a malformed one, a required parameter left out."""
PROJECT = "default"
NAMES = st.sampled_from(["alpha", "beta", "gamma"])
"""A few names, so that the writes and reads of one kind meet the same objects."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The brake on failed sign-ins is lifted: checking that a route enforces auth means requests without a
    token, and past the brake's limit even the admin's requests would get 429 for a minute."""
    env = {"MESHPLANE_FAILED_AUTH_PER_MINUTE": "1000000"}
    with run_server(tmp_path_factory.mktemp("fuzz"), env=env) as running:
        yield running


@pytest.fixture(scope="module")
def api_schema(server: ServerProcess) -> schemathesis.BaseSchema:
    config = SchemathesisConfig.from_dict(
        {
            "auth": {"openapi": {"HTTPBearer": {"bearer": server.token}}},
            "checks": {"positive_data_acceptance": {"enabled": False}},
            # The server ignores query parameters it does not know, as Kubernetes does.
            "generation": {"allow-extra-parameters": False},
            # A watch that succeeds streams until the client leaves: read it for a second, or 5 events.
            "operations": [
                {"include-path": "/v1/watch", "request-timeout": 1.0, "max-stream-events": 5},
                # DELETE /v1/signing-keys/{kid} serves this URL too (kid "rotate"), so a true `Allow` names
                # DELETE, which this path's own operations do not: the check would fault an overlap of the design.
                {
                    "include-path": "/v1/signing-keys/rotate",
                    "checks": {"allow_header_conformance": {"enabled": False}},
                },
            ],
        }
    )
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=config)


def operations(schema: schemathesis.BaseSchema) -> list[schemathesis.APIOperation]:
    return [result.ok() for result in schema.get_all_operations()]


def protocol_cases(schema: schemathesis.BaseSchema, operation: schemathesis.APIOperation) -> list[schemathesis.Case]:
    generated = schema.iter_coverage_cases(
        operation,
        generation_modes=list(schemathesis.GenerationMode),
        generation_config=schema.config.generation_for(operation=operation),
    )
    return [case for case in generated if coverage_scenario(case) in PROTOCOL]


def aimed(case: schemathesis.Case, name: str) -> schemathesis.Case:
    """A schema-valid case pointed at what exists: the project the server starts with, and a shared name in both
    the path and the body. Random names are rarely DNS labels and random projects never exist, so without this
    nearly every request stops at a 404 or 422 before the code behind it runs."""
    scoped = "project" in case.path_parameters
    for parameter in ("name", "application"):
        if parameter in case.path_parameters:
            case.path_parameters[parameter] = name
    if scoped:
        case.path_parameters["project"] = PROJECT
    metadata = case.body.get("metadata") if isinstance(case.body, dict) else None
    if isinstance(metadata, dict):
        metadata["name"] = name
        if scoped:
            metadata["project"] = PROJECT
        else:
            metadata.pop("project", None)
    return case


def test_every_operation_is_fuzzed(api_schema: schemathesis.BaseSchema) -> None:
    untagged = [op.label for op in operations(api_schema) if not set(op.tags or ()) & set(TAGS)]

    assert not untagged, "add their tag to TAGS"


@pytest.mark.parametrize("tag", TAGS)
def test_operations_answer_as_documented(
    tag: str, api_schema: schemathesis.BaseSchema, subtests: pytest.Subtests
) -> None:
    tagged = [op for op in operations(api_schema) if tag in (op.tags or ())]
    assert tagged
    for operation in tagged:
        valid = operation.as_strategy(schemathesis.GenerationMode.POSITIVE)
        generated = st.one_of(
            valid,
            st.builds(aimed, valid, NAMES),
            operation.as_strategy(schemathesis.GenerationMode.NEGATIVE),
        )

        @EXAMPLES
        @given(case=generated)
        def fuzz(case: schemathesis.Case) -> None:
            case.call_and_validate()

        with subtests.test(msg=operation.label):
            fuzz()
            for case in protocol_cases(api_schema, operation):
                case.call_and_validate()
