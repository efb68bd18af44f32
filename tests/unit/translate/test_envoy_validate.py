"""Real Envoy accepts what we generate: `envoy --mode validate`, offline, a fraction of a second each."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from meshplane.agent.bootstrap import bootstrap_yaml, envoy_bootstrap
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.model.resource import Resource
from meshplane_testing.envoy import envoy_binary, validate
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, api, api_sets, backend, example_api

pytestmark = pytest.mark.envoy


@pytest.fixture(autouse=True)
def _envoy_installed() -> None:
    envoy_binary()


def assert_valid(tmp_path: Path, bootstrap: dict) -> None:
    accepted, output = validate(tmp_path, bootstrap)
    assert accepted, output


@pytest.mark.parametrize(
    ("xds_host", "admin_port"), [("127.0.0.1", 19000), ("::1", None), ("meshplane.meshplane-system.svc", 19001)]
)
def test_envoy_accepts_the_bootstrap(tmp_path: Path, xds_host: str, admin_port: int | None) -> None:
    assert_valid(tmp_path, envoy_bootstrap("gw-1", xds_host, 18000, admin_port=admin_port))


def test_bootstrap_yaml_is_the_bootstrap() -> None:
    import yaml

    assert yaml.safe_load(bootstrap_yaml("gw-1", "127.0.0.1", 18000, cluster="c")) == envoy_bootstrap(
        "gw-1", "127.0.0.1", 18000, cluster="c"
    )


def test_envoy_accepts_the_example_api(tmp_path: Path) -> None:
    assert_valid(tmp_path, static_bootstrap(translate_apis([example_api()], GatewaySettings(backends=LOOPBACK))))


def test_envoy_accepts_no_apis(tmp_path: Path) -> None:
    assert_valid(tmp_path, static_bootstrap(translate_apis([], GatewaySettings(backends=LOOPBACK))))


def test_envoy_accepts_long_templated_paths(tmp_path: Path) -> None:
    """Longer than RE2's default program-size limit of 100, which the bootstrap raises."""
    path = "/organizations/{org}/projects/{project}/environments/{env}/deployments/{id}/revisions/{rev}/*"
    apis = [
        api(
            "deep",
            basePath="/api/v1/with-a-rather-long-prefix",
            operations=[{"method": "GET", "path": path}],
            backends=[backend(basePath="/internal/v1")],
        )
    ]
    assert_valid(tmp_path, static_bootstrap(translate_apis(apis, GatewaySettings(backends=LOOPBACK))))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(api_sets(max_size=4))
def test_envoy_accepts_generated_apis(tmp_path: Path, apis: list[Resource]) -> None:
    assert_valid(
        tmp_path, static_bootstrap(translate_apis(apis, GatewaySettings(backends=LOOPBACK, listener_port=10001)))
    )
