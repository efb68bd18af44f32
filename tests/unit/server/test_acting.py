"""Who a write acts for, as each door names it."""

from meshplane.audit import Actor, acting_as, current_actor
from meshplane.model.roles import Role
from meshplane.server.acting import for_cluster, request_id_of
from meshplane.server.auth.oidc import principal_of


def test_an_oidc_user_acts_as_its_subject() -> None:
    principal = principal_of({"sub": "alice@example.com", "roles": ["viewer"]}, "roles")

    assert principal is not None
    assert (principal.who, principal.role) == ("oidc/alice@example.com", Role.VIEWER)


def test_a_clusters_reports_act_as_the_cluster() -> None:
    assert for_cluster("edge-1", "ipv4:127.0.0.1:5000").who == "cluster/edge-1"


def test_a_sane_request_id_is_kept_and_any_other_replaced() -> None:
    def scope(value: str) -> dict:
        return {"headers": [(b"x-request-id", value.encode())]}

    assert request_id_of(scope("deploy-42")) == "deploy-42"
    assert request_id_of(scope("bad id\r\nX-Injected: 1")) != "bad id\r\nX-Injected: 1"
    assert len(request_id_of(scope("x" * 500))) == 32
    assert len(request_id_of({"headers": []})) == 32


def test_the_innermost_actor_holds_and_the_outer_one_comes_back() -> None:
    assert current_actor() is None
    with acting_as(Actor("rollout/r1")):
        with acting_as(Actor("cluster/edge-1")):
            assert current_actor() == Actor("cluster/edge-1")
        assert current_actor() == Actor("rollout/r1")
    assert current_actor() is None
