import grpc
import pytest
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.rpc import status_pb2

from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import XdsServer
from meshplane_testing.xds_doubles import NUMBER, STRING, Agent, RawStream, Recorder, number, serve_xds, text, versions


def server(cache: ResourceCache, callbacks: Recorder | None = None) -> XdsServer:
    return XdsServer(cache, node_group=lambda node, context: node.cluster, callbacks=callbacks)


async def test_agent_receives_all_of_its_group_and_nothing_of_others():
    cache = ResourceCache()
    cache.set_snapshot("east", {STRING: {"a": text("a"), "b": text("b")}, NUMBER: {"n": number("n", 1)}})
    cache.set_type("west", STRING, {"w": text("w")})

    async with serve_xds(server(cache)) as served:
        agent = Agent(served, "east", (STRING, NUMBER))
        async with agent.running():
            want = {STRING: versions(text("a"), text("b")), NUMBER: versions(number("n", 1))}
            await agent.until(lambda: agent.held == want)
            assert await agent.silent()
            assert agent.held == want
            assert agent.client.connected


async def test_updates_and_removals_arrive():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a"), "b": text("b")})

    async with serve_xds(server(cache)) as served:
        agent = Agent(served, "g")
        async with agent.running():
            await agent.until(lambda: len(agent.held[STRING]) == 2)
            cache.update("g", STRING, upserts=[text("a", "v2"), text("c")], removals=["b"])
            want = versions(text("a", "v2"), text("c"))
            await agent.until(lambda: agent.held[STRING] == want)
            assert [sorted(r.name for r in u.upserts) for u in agent.updates] == [["a", "b"], ["a", "c"]]
            assert agent.updates[-1].removed == ["b"]


async def test_reconnect_sends_only_what_changed_and_what_was_removed_meanwhile():
    cache = ResourceCache()
    cache.set_type("g", STRING, {name: text(name) for name in "abcd"})

    async with serve_xds(server(cache)) as served:
        first = Agent(served, "g")
        async with first.running():
            await first.until(lambda: len(first.held[STRING]) == 4)

        cache.update("g", STRING, upserts=[text("b", "v2"), text("e")], removals=["c"])
        again = Agent(served, "g", held=first.held)
        async with again.running():
            await again.until(lambda: again.held[STRING] == versions(*cache.resources("g", STRING).values()))
            assert again.sent == 2
            assert [sorted(r.name for r in u.upserts) for u in again.updates] == [["b", "e"]]
            assert again.updates[0].removed == ["c"]


async def test_reconnect_when_nothing_changed_gets_one_empty_sync_response():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})

    async with serve_xds(server(cache)) as served:
        agent = Agent(served, "g", held={STRING: versions(text("a"))})
        async with agent.running():
            await agent.until(lambda: agent.connects == 1)
            assert await agent.silent()
            assert [(u.upserts, u.removed) for u in agent.updates] == [([], [])]


async def test_nacked_version_is_not_resent_but_the_next_version_is():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"good": text("good")})
    recorder = Recorder()

    def reject_bad(update) -> str | None:
        return (
            "bad value" if any(r.name == "bad" and r.version == text("bad").version for r in update.upserts) else None
        )

    async with serve_xds(server(cache, recorder)) as served:
        agent = Agent(served, "g", reject=reject_bad)
        async with agent.running():
            await agent.until(lambda: "good" in agent.held[STRING])
            cache.update("g", STRING, upserts=[text("bad")])
            await recorder.signal.until(lambda: bool(recorder.nacks))
            assert recorder.nacks == [("g", STRING, versions(text("bad")), "bad value")]

            cache.update("g", STRING, upserts=[text("other")])  # wakes the stream; "bad" must stay unsent
            await agent.until(lambda: "other" in agent.held[STRING])
            assert await agent.silent()
            assert sum(r.name == "bad" for u in agent.updates for r in u.upserts) == 1

            cache.update("g", STRING, upserts=[text("bad", "fixed")])
            await agent.until(lambda: agent.held[STRING].get("bad") == text("bad", "fixed").version)
            await recorder.signal.until(lambda: recorder.acks[-1][2].get("bad") == text("bad", "fixed").version)


async def test_a_nack_blames_what_was_new_not_what_the_client_resubscribed_to():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"held": text("held"), "new": text("new")})
    recorder = Recorder()

    async with serve_xds(server(cache, recorder)) as served, served.channel() as channel:
        stream = RawStream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources())
        await stream.send(
            discovery_pb2.DeltaDiscoveryRequest(
                node=Node(id="n", cluster="g"), type_url=STRING, resource_names_subscribe=["held"]
            )
        )
        await stream.send(_ack(await stream.recv()))
        await recorder.signal.until(lambda: bool(recorder.acks))

        await stream.send(
            discovery_pb2.DeltaDiscoveryRequest(type_url=STRING, resource_names_subscribe=["held", "new"])
        )
        both = await stream.recv()
        assert sorted(r.name for r in both.resources) == ["held", "new"]
        refusal = discovery_pb2.DeltaDiscoveryRequest(
            type_url=STRING, response_nonce=both.nonce, error_detail=status_pb2.Status(message="no new")
        )
        await stream.send(refusal)
        await recorder.signal.until(lambda: bool(recorder.nacks))
        assert recorder.nacks == [("g", STRING, versions(text("new")), "no new")]
        await stream.close()


async def test_a_client_that_resubscribes_holding_the_current_versions_is_known_to_hold_them():
    """Envoy reconnecting (to a restarted agent) names what it holds in initial_resource_versions; when that is
    what the cache has, nothing is sent, so no ACK will ever come on this stream: what it declared is what it
    holds, and those who wait for its ACKs must hear so at once."""
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})
    recorder = Recorder()

    async with serve_xds(server(cache, recorder)) as served, served.channel() as channel:
        stream = RawStream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources())
        await stream.send(
            discovery_pb2.DeltaDiscoveryRequest(
                node=Node(id="n", cluster="g"),
                type_url=STRING,
                resource_names_subscribe=["a"],
                initial_resource_versions=versions(text("a")),
            )
        )
        assert await stream.silent()
        await recorder.signal.until(lambda: bool(recorder.acks))
        assert recorder.acks == [("g", STRING, versions(text("a")))]
        await stream.close()


async def test_unchanged_updates_send_nothing():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})

    async with serve_xds(server(cache)) as served:
        agent = Agent(served, "g")
        async with agent.running():
            await agent.until(lambda: "a" in agent.held[STRING])
            generation = cache.generation("g")
            cache.update("g", STRING, upserts=[text("a")], removals=["never-there"])
            cache.set_type("g", STRING, {"a": text("a")})
            assert cache.generation("g") == generation
            assert await agent.silent()
            assert len(agent.updates) == 1


async def test_acks_report_everything_the_node_now_holds_and_streams_report_open_and_close():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a"), "b": text("b")})
    recorder = Recorder()

    async with serve_xds(server(cache, recorder)) as served:
        agent = Agent(served, "g")
        async with agent.running():
            await recorder.signal.until(lambda: bool(recorder.acks))
            cache.update("g", STRING, upserts=[text("c")], removals=["a"])
            await recorder.signal.until(lambda: len(recorder.acks) == 2)
        await recorder.signal.until(lambda: bool(recorder.closed))

    assert recorder.acks == [
        ("g", STRING, versions(text("a"), text("b"))),
        ("g", STRING, versions(text("b"), text("c"))),
    ]
    assert recorder.opened == [("agent-g", "g", True)]
    assert recorder.closed == [("agent-g", "g")]


async def test_refused_node_gets_permission_denied():
    def refuse(node: Node, context: grpc.aio.ServicerContext) -> str:
        raise PermissionError(f"{node.id} is not registered")

    async with serve_xds(XdsServer(ResourceCache(), node_group=refuse)) as served, served.channel() as channel:
        stream = RawStream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources())
        await stream.send(discovery_pb2.DeltaDiscoveryRequest(node=Node(id="stranger"), type_url=STRING))
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stream.recv()
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert denied.value.details() == "stranger is not registered"
        await stream.close()


async def test_explicit_subscriptions_get_named_resources_and_hear_about_missing_ones():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a"), "b": text("b")})

    async with serve_xds(server(cache)) as served, served.channel() as channel:
        stream = RawStream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources())
        await stream.send(
            discovery_pb2.DeltaDiscoveryRequest(
                node=Node(id="n", cluster="g"), type_url=STRING, resource_names_subscribe=["a", "missing"]
            )
        )
        response = await stream.recv()
        assert [r.name for r in response.resources] == ["a"]
        assert list(response.removed_resources) == ["missing"]
        await stream.send(_ack(response))

        cache.update("g", STRING, upserts=[text("b", "v2")])  # not subscribed
        assert await stream.silent()

        await stream.send(discovery_pb2.DeltaDiscoveryRequest(type_url=STRING, resource_names_unsubscribe=["a"]))
        # Requests are handled in order, so the answer about "probe" means "a" is unsubscribed by now.
        await stream.send(discovery_pb2.DeltaDiscoveryRequest(type_url=STRING, resource_names_subscribe=["probe"]))
        response = await stream.recv()
        assert (list(response.resources), list(response.removed_resources)) == ([], ["probe"])
        await stream.send(_ack(response))
        cache.update("g", STRING, upserts=[text("a", "v2")])
        assert await stream.silent()

        await stream.send(discovery_pb2.DeltaDiscoveryRequest(type_url=STRING, resource_names_subscribe=["*"]))
        response = await stream.recv()
        assert sorted(r.name for r in response.resources) == ["a", "b"]
        await stream.close()


async def test_resubscribing_resends_even_what_the_client_should_have():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})

    async with serve_xds(server(cache)) as served, served.channel() as channel:
        stream = RawStream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources())
        request = discovery_pb2.DeltaDiscoveryRequest(
            node=Node(id="n", cluster="g"), type_url=STRING, resource_names_subscribe=["a"]
        )
        await stream.send(request)
        await stream.send(_ack(await stream.recv()))
        await stream.send(discovery_pb2.DeltaDiscoveryRequest(type_url=STRING, resource_names_subscribe=["a"]))
        assert [r.name for r in (await stream.recv()).resources] == ["a"]
        await stream.close()


async def test_nothing_is_sent_for_a_type_the_group_has_never_had():
    cache = ResourceCache()

    async with serve_xds(server(cache)) as served:
        agent = Agent(served, "g", held={STRING: versions(text("a"))})
        async with agent.running():
            assert await agent.silent()
            assert agent.updates == []  # an agent starting up must not be told to drop what it holds
            cache.set_type("g", STRING, {"b": text("b")})
            await agent.until(lambda: agent.held[STRING] == versions(text("b")))


async def test_a_dropped_group_refilled_later_is_reconciled_in_full():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a"), "b": text("b")})

    async with serve_xds(server(cache)) as served:
        agent = Agent(served, "g")
        async with agent.running():
            await agent.until(lambda: len(agent.held[STRING]) == 2)
            cache.drop_group("g")
            assert await agent.silent()
            cache.set_type("g", STRING, {"b": text("b", "v2"), "c": text("c")})
            await agent.until(lambda: agent.held[STRING] == versions(text("b", "v2"), text("c")))


async def test_a_change_to_several_types_is_sent_in_type_order():
    cache = ResourceCache()
    cache.set_snapshot("g", {STRING: {"a": text("a")}, NUMBER: {"n": number("n", 1)}})
    not_alphabetical = (STRING, NUMBER)
    xds = XdsServer(cache, node_group=lambda node, context: node.cluster, type_order=not_alphabetical)

    async with serve_xds(xds) as served:
        agent = Agent(served, "g", (STRING, NUMBER))
        async with agent.running():
            await agent.until(lambda: len(agent.updates) == 2)
            cache.set_snapshot("g", {STRING: {"a": text("a", "v2")}, NUMBER: {"n": number("n", 2)}})
            await agent.until(lambda: len(agent.updates) == 4)
            assert [u.type_url for u in agent.updates[2:]] == [STRING, NUMBER]


def _ack(response: discovery_pb2.DeltaDiscoveryResponse) -> discovery_pb2.DeltaDiscoveryRequest:
    return discovery_pb2.DeltaDiscoveryRequest(type_url=response.type_url, response_nonce=response.nonce)


async def test_changes_made_while_a_client_digests_a_response_come_together_once_it_answers():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})

    async with serve_xds(server(cache)) as served, served.channel() as channel:
        stream = RawStream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources())
        await stream.send(discovery_pb2.DeltaDiscoveryRequest(node=Node(id="n", cluster="g"), type_url=STRING))
        first = await stream.recv()
        cache.update("g", STRING, upserts=[text("b")])
        cache.update("g", STRING, upserts=[text("c")], removals=["a"])
        assert await stream.silent()

        await stream.send(_ack(first))
        second = await stream.recv()
        assert (sorted(r.name for r in second.resources), list(second.removed_resources)) == (["b", "c"], ["a"])
        assert await stream.silent()
        await stream.close()


async def test_a_rejected_response_lets_the_next_change_through_at_once():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})

    async with serve_xds(server(cache)) as served, served.channel() as channel:
        stream = RawStream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources())
        await stream.send(discovery_pb2.DeltaDiscoveryRequest(node=Node(id="n", cluster="g"), type_url=STRING))
        await stream.send(_ack(await stream.recv()))
        cache.update("g", STRING, upserts=[text("a", "bad")])
        bad = await stream.recv()
        cache.update("g", STRING, upserts=[text("b")])
        assert await stream.silent()

        rejection = status_pb2.Status(code=3, message="no")
        await stream.send(
            discovery_pb2.DeltaDiscoveryRequest(type_url=STRING, response_nonce=bad.nonce, error_detail=rejection)
        )
        assert [r.name for r in (await stream.recv()).resources] == ["b"]
        await stream.close()
