"""The wave planner and the rollout step: no cluster is ever ahead of its wave, every placed cluster is in exactly
one wave, and each gate (applied, NACK, error ratio, bake, offline) decides as its policy says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.model.rollouts import (
    ClusterState,
    Phase,
    RolloutPolicySpec,
    RolloutSpec,
    TargetRef,
    WaveState,
)
from meshplane.server.rollout_plan import (
    Observed,
    RolloutActionRefused,
    abort,
    advance,
    assign_waves,
    pause,
    promote,
    resume,
    revision_for,
    start,
    superseded_by,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CLUSTERS = {"edge-1": {"region": "eu"}, "eu-1": {"region": "eu"}, "eu-2": {"region": "eu"}, "us-1": {"region": "us"}}


def policy(**fields: object) -> RolloutPolicySpec:
    body = {
        "waves": [
            {"name": "canary", "clusters": ["edge-1"], "bake": "30s"},
            {"name": "eu", "clusterSelector": {"matchLabels": {"region": "eu"}}, "bake": "60s"},
            {"name": "rest"},
        ],
        **fields,
    }
    return RolloutPolicySpec.model_validate(body)


def rollout(strategy: RolloutPolicySpec | None = None, **fields: object) -> RolloutSpec:
    spec = RolloutSpec(
        target=TargetRef(kind="API", name="orders"),
        policy="careful",
        strategy=strategy or policy(),
        from_revision=10,
        to_revision=12,
        **fields,  # type: ignore[arg-type]
    )
    return start(spec, T0)


def applied(*clusters: str, **figures: tuple[int, int]) -> dict[str, Observed]:
    seen = {c: Observed(state="Applied") for c in clusters}
    for cluster, (requests, errors) in figures.items():
        seen[cluster.replace("_", "-")] = Observed(state="Applied", requests=requests, errors=errors)
    return seen


def wave_members(spec: RolloutSpec) -> list[list[str]]:
    return [[c.name for c in wave.clusters] for wave in spec.waves]


def test_each_cluster_goes_to_the_first_wave_that_selects_it_and_the_rest_take_the_others() -> None:
    assert assign_waves(policy().waves, CLUSTERS) == [["edge-1"], ["eu-1", "eu-2"], ["us-1"]]


def test_clusters_no_wave_selects_go_to_the_last_wave_when_no_wave_takes_the_rest() -> None:
    strategy = RolloutPolicySpec.model_validate(
        {"waves": [{"name": "a", "clusters": ["us-1"]}, {"name": "b", "clusters": ["eu-1"]}]}
    )
    assert assign_waves(strategy.waves, CLUSTERS) == [["us-1"], ["edge-1", "eu-1", "eu-2"]]


def test_a_change_reaches_each_wave_in_order_once_the_one_before_applied_it_and_baked() -> None:
    spec = advance(rollout(), CLUSTERS, {}, T0)
    assert spec.released == ["edge-1"]
    assert wave_members(spec) == [["edge-1"], ["eu-1", "eu-2"], ["us-1"]]
    spec = advance(spec, CLUSTERS, applied("edge-1"), T0 + timedelta(seconds=1))
    assert (spec.waves[0].state, spec.released) == (WaveState.BAKING, ["edge-1"])
    spec = advance(spec, CLUSTERS, applied("edge-1"), T0 + timedelta(seconds=30))
    assert spec.released == ["edge-1"]  # baked 29 s of 30
    spec = advance(spec, CLUSTERS, applied("edge-1"), T0 + timedelta(seconds=31))
    assert spec.released == ["edge-1", "eu-1", "eu-2"]
    assert spec.current_wave == 1
    spec = advance(spec, CLUSTERS, applied("edge-1", "eu-1", "eu-2"), T0 + timedelta(seconds=32))
    spec = advance(spec, CLUSTERS, applied("edge-1", "eu-1", "eu-2"), T0 + timedelta(seconds=92))
    assert (spec.current_wave, spec.released) == (2, ["edge-1", "eu-1", "eu-2", "us-1"])
    spec = advance(spec, CLUSTERS, applied(*CLUSTERS), T0 + timedelta(seconds=93))
    assert spec.phase is Phase.SUCCEEDED


def test_a_nack_in_the_canary_rolls_back_and_no_later_wave_is_released() -> None:
    spec = advance(rollout(), CLUSTERS, {}, T0)
    nacked = {"edge-1": Observed(state="Failed", message="route regex too large")}
    spec = advance(spec, CLUSTERS, nacked, T0 + timedelta(seconds=1))
    assert spec.phase is Phase.ROLLED_BACK
    assert spec.released == ["edge-1"]
    assert "edge-1: route regex too large" in spec.reason
    assert spec.waves[0].state is WaveState.FAILED


def test_a_failure_under_a_pause_policy_pauses_and_resume_judges_the_wave_afresh() -> None:
    spec = advance(rollout(policy(onFailure="Pause")), CLUSTERS, {}, T0)
    spec = advance(spec, CLUSTERS, {"edge-1": Observed(state="Failed", message="bad")}, T0)
    assert spec.phase is Phase.PAUSED
    assert advance(spec, CLUSTERS, applied("edge-1"), T0) == spec  # paused: nothing moves
    spec = resume(spec, T0)
    assert spec.waves[0].clusters[0].state is ClusterState.PENDING
    spec = advance(spec, CLUSTERS, applied("edge-1"), T0 + timedelta(seconds=1))
    assert spec.waves[0].state is WaveState.BAKING


def test_a_5xx_share_above_the_error_ratio_over_the_bake_rolls_back() -> None:
    strategy = policy(failOn={"errorRatio": 0.05, "minRequests": 50})
    spec = advance(rollout(strategy), CLUSTERS, {}, T0)
    spec = advance(spec, CLUSTERS, applied(edge_1=(1000, 900)), T0)  # counted before the bake: not the change's
    assert spec.waves[0].state is WaveState.BAKING
    spec = advance(spec, CLUSTERS, applied(edge_1=(1040, 920)), T0 + timedelta(seconds=5))
    assert spec.phase is Phase.PROGRESSING  # 40 requests: under minRequests
    spec = advance(spec, CLUSTERS, applied(edge_1=(1100, 960)), T0 + timedelta(seconds=10))
    assert spec.phase is Phase.ROLLED_BACK
    assert "60 of 100 requests answered 5xx" in spec.reason


def test_a_low_5xx_share_passes_the_bake() -> None:
    strategy = policy(failOn={"errorRatio": 0.05, "minRequests": 50})
    spec = advance(rollout(strategy), CLUSTERS, {}, T0)
    spec = advance(spec, CLUSTERS, applied(edge_1=(0, 0)), T0)
    spec = advance(spec, CLUSTERS, applied(edge_1=(200, 4)), T0 + timedelta(seconds=30))
    assert (spec.phase, spec.current_wave) == (Phase.PROGRESSING, 1)
    assert (spec.waves[0].requests, spec.waves[0].errors) == (200, 4)


def test_a_gateway_restart_counts_from_zero_rather_than_a_negative_delta() -> None:
    strategy = policy(failOn={"errorRatio": 0.05, "minRequests": 50})
    spec = advance(rollout(strategy), CLUSTERS, {}, T0)
    spec = advance(spec, CLUSTERS, applied(edge_1=(5000, 10)), T0)
    spec = advance(spec, CLUSTERS, applied(edge_1=(100, 50)), T0 + timedelta(seconds=5))
    assert spec.phase is Phase.ROLLED_BACK


def test_an_offline_cluster_is_skipped_under_skip_and_waited_for_under_wait() -> None:
    offline = {"edge-1": Observed(connected=False)}
    skipping = advance(rollout(policy(offline="Skip")), CLUSTERS, offline, T0)
    assert skipping.waves[0].clusters[0].state is ClusterState.SKIPPED
    assert skipping.waves[0].state is WaveState.BAKING
    assert "edge-1" in skipping.released  # it takes the change when it connects
    waiting = advance(rollout(policy(offline="Wait")), CLUSTERS, offline, T0 + timedelta(seconds=31))
    waiting = advance(waiting, CLUSTERS, offline, T0 + timedelta(seconds=300))
    assert (waiting.current_wave, waiting.waves[0].clusters[0].state) == (0, ClusterState.PENDING)


def test_max_concurrent_releases_a_wave_a_few_clusters_at_a_time() -> None:
    strategy = RolloutPolicySpec.model_validate({"waves": [{"name": "all", "maxConcurrent": 2}]})
    spec = advance(rollout(strategy), CLUSTERS, {}, T0)
    assert spec.released == ["edge-1", "eu-1"]
    spec = advance(spec, CLUSTERS, applied("edge-1"), T0)
    assert spec.released == ["edge-1", "eu-1", "eu-2"]


def test_a_newer_write_keeps_each_cluster_on_what_the_superseded_rollout_gave_it() -> None:
    old = advance(rollout(), CLUSTERS, {}, T0)
    old = advance(old, CLUSTERS, applied("edge-1"), T0)
    old = advance(old, CLUSTERS, applied("edge-1"), T0 + timedelta(seconds=30))
    assert old.released == ["edge-1", "eu-1", "eu-2"]
    newer = RolloutSpec(target=old.target, policy="careful", strategy=policy(), from_revision=12, to_revision=15)
    new = start(newer, T0 + timedelta(seconds=40), superseded=old)
    assert new.from_revision == 10
    assert {c: revision_for(new, c) for c in CLUSTERS} == {"edge-1": 12, "eu-1": 12, "eu-2": 12, "us-1": 10}
    assert superseded_by(old, 15, T0).phase is Phase.SUPERSEDED


def test_actions_fit_the_phase() -> None:
    spec = advance(rollout(), CLUSTERS, {}, T0)
    paused = pause(spec, T0)
    with pytest.raises(RolloutActionRefused):
        pause(paused, T0)
    with pytest.raises(RolloutActionRefused):
        resume(spec, T0)
    promoted = promote(paused, CLUSTERS, T0)
    assert (promoted.phase, promoted.released) == (Phase.SUCCEEDED, sorted(CLUSTERS))
    with pytest.raises(RolloutActionRefused):
        abort(promoted, T0)
    assert abort(spec, T0).phase is Phase.ABORTED


def test_a_policy_refuses_two_waves_of_one_name() -> None:
    with pytest.raises(ValueError, match="distinct"):
        RolloutPolicySpec.model_validate({"waves": [{"name": "a"}, {"name": "a"}]})


# -- properties ---------------------------------------------------------------------------------------------

NAMES = [f"c{i}" for i in range(6)]
labels = st.fixed_dictionaries({"region": st.sampled_from(["eu", "us", "ap"])})
fleets = st.dictionaries(st.sampled_from(NAMES), labels, max_size=6)
waves = st.lists(
    st.one_of(
        st.builds(lambda cs: {"clusters": cs}, st.lists(st.sampled_from(NAMES), min_size=1, max_size=3)),
        st.builds(lambda r: {"clusterSelector": {"matchLabels": {"region": r}}}, st.sampled_from(["eu", "us"])),
        st.just({}),
    ).map(lambda w: w | {"bake": "10s"}),
    min_size=1,
    max_size=4,
).map(lambda ws: [w | {"name": f"w{i}"} for i, w in enumerate(ws)])
observations = st.dictionaries(
    st.sampled_from(NAMES),
    st.builds(Observed, connected=st.booleans(), state=st.sampled_from([None, "Applied", "Pending", "Failed"])),
)


@settings(max_examples=200, deadline=None)
@given(fleets, waves, st.sampled_from(["Skip", "Wait"]), st.lists(observations, max_size=12), st.integers(1, 3))
def test_no_cluster_is_ever_ahead_of_its_wave_and_every_placed_cluster_is_in_exactly_one(
    fleet: dict[str, dict[str, str]], wave_list: list[dict], offline: str, looks: list[dict[str, Observed]], limit: int
) -> None:
    for wave in wave_list[:1]:
        wave["maxConcurrent"] = limit
    strategy = RolloutPolicySpec.model_validate({"waves": wave_list, "offline": offline, "onFailure": "Pause"})
    spec = rollout(strategy)
    released: set[str] = set()
    for step, seen in enumerate([{}, *looks]):
        spec = advance(spec, fleet, seen, T0 + timedelta(seconds=11 * step))
        members = [c for wave in spec.waves for c in (x.name for x in wave.clusters)]
        assert sorted(members) == sorted(fleet)  # every placed cluster in exactly one wave
        reached = {c.name for wave in spec.waves[: spec.current_wave + 1] for c in wave.clusters}
        assert set(spec.released) <= reached | set(NAMES) - set(fleet)  # none ahead of its wave
        assert released <= set(spec.released)  # a released cluster never goes back
        released = set(spec.released)
        if spec.phase is Phase.PROGRESSING and spec.current_wave < len(spec.waves):
            wave = spec.waves[spec.current_wave]
            unfinished = [c for c in wave.clusters if c.state is ClusterState.PENDING]
            assert len(unfinished) <= (strategy.waves[spec.current_wave].max_concurrent or len(wave.clusters))
        if spec.phase is not Phase.PROGRESSING:
            break
