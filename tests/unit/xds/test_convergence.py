"""Property: whatever the cache goes through, a delta agent ends up holding exactly its group's set."""

import itertools
from contextlib import AsyncExitStack
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import XdsServer
from meshplane_testing.xds_doubles import NUMBER, STRING, Agent, Served, by_cluster, serve_xds, text

TYPES = (STRING, NUMBER)
names = st.sampled_from("abcdef")
contents = st.dictionaries(names, st.sampled_from("xyz"), max_size=6)
type_urls = st.sampled_from(TYPES)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("set_type"), type_urls, contents),
        st.tuples(st.just("update"), type_urls, contents, st.lists(names, max_size=3)),
        st.tuples(st.just("snapshot"), st.dictionaries(type_urls, contents)),
        st.tuples(st.just("noise"), contents),  # another group changes
        st.just(("deliver",)),  # let the server push before the next change
        st.just(("reconnect",)),
    ),
    max_size=12,
)
groups = itertools.count()


def resources(content: dict[str, str]) -> dict:
    return {name: text(name, value) for name, value in content.items()}


@pytest.fixture
async def served():
    cache = ResourceCache()
    async with serve_xds(XdsServer(cache, node_group=by_cluster)) as served:
        yield cache, served


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations)
async def test_agent_converges_on_its_groups_set(served: tuple[ResourceCache, Served], ops):
    cache, server = served
    group = f"g{next(groups)}"
    async with AsyncExitStack() as stack:
        agent = await stack.enter_async_context(Agent(server, group, TYPES).running())
        for op in ops:
            match op:
                case ("set_type", type_url, content):
                    cache.set_type(group, type_url, resources(content))
                case ("update", type_url, content, removals):
                    cache.update(group, type_url, resources(content).values(), removals)
                case ("snapshot", snapshot):
                    cache.set_snapshot(group, {url: resources(content) for url, content in snapshot.items()})
                case ("noise", content):
                    cache.set_type(f"{group}-other", STRING, resources(content))
                case ("deliver",):
                    await agent.until(partial(_converged, agent, cache, group))
                case ("reconnect",):
                    await stack.aclose()
                    agent = await stack.enter_async_context(Agent(server, group, TYPES, held=agent.held).running())
        await agent.until(partial(_converged, agent, cache, group))


def _converged(agent: Agent, cache: ResourceCache, group: str) -> bool:
    return all(
        agent.held[url] == {name: res.version for name, res in cache.resources(group, url).items()} for url in TYPES
    )
