"""The agent's `--server`: one address (a name may stand for several replicas), or several replicas' IP
addresses, each agent starting at a replica of its own choosing and moving to another when it goes."""

from __future__ import annotations

import json

import grpc
import pytest
from pydantic import ValidationError

from meshplane.agent.channel import SPREAD_OVER_REPLICAS, channel_target
from meshplane.config import AgentSettings


@pytest.mark.parametrize(
    ("server", "target"),
    [
        ("127.0.0.1:18000", "127.0.0.1:18000"),
        ("meshplane.example:18000", "meshplane.example:18000"),
        ("10.0.0.1:18000,10.0.0.2:18000", "ipv4:10.0.0.1:18000,10.0.0.2:18000"),
        (" 10.0.0.1:18000 , 10.0.0.2:18001 ", "ipv4:10.0.0.1:18000,10.0.0.2:18001"),
        ("[fd00::1]:18000,[fd00::2]:18000", "ipv6:[fd00::1]:18000,[fd00::2]:18000"),
    ],
)
def test_the_channel_target_names_every_replica(server: str, target: str) -> None:
    assert channel_target(AgentSettings(server=server, tls_server_name="meshplane.example").server) == target


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("a.example:18000,b.example:18000", "several server addresses are IP addresses"),
        ("10.0.0.1:18000,[fd00::1]:18000", "all IPv4 or all IPv6"),
        ("10.0.0.1:18000,", "is not host:port"),
        ("10.0.0.1:18000,10.0.0.1:18000", "is named twice"),
    ],
)
def test_a_bad_server_list_is_refused_with_why(server: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        AgentSettings(server=server, tls_server_name="meshplane.example")


def test_several_replicas_over_tls_need_the_name_their_certificates_share() -> None:
    with pytest.raises(ValidationError, match="several server addresses need tls_server_name"):
        AgentSettings(server="10.0.0.1:18000,10.0.0.2:18000")
    assert AgentSettings(server="10.0.0.1:18000,10.0.0.2:18000", insecure=True).insecure


async def _replica(name: str) -> tuple[grpc.aio.Server, int]:
    """A server whose one method answers with its name."""

    async def who(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return name.encode()

    handler = grpc.method_handlers_generic_handler("test.Replica", {"Who": grpc.unary_unary_rpc_method_handler(who)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([handler])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def _answer(target: str) -> str:
    options = [("grpc.service_config", json.dumps({"loadBalancingConfig": json.loads(SPREAD_OVER_REPLICAS)}))]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        reply = await channel.unary_unary("/test.Replica/Who")(b"", timeout=5)
    return reply.decode()


async def test_agents_spread_over_the_replicas_and_move_when_one_goes() -> None:
    (a, a_port), (b, b_port) = await _replica("a"), await _replica("b")
    try:
        target = channel_target(AgentSettings(server=f"127.0.0.1:{a_port},127.0.0.1:{b_port}", insecure=True).server)
        answers = [await _answer(target) for _ in range(40)]
        assert {"a", "b"} == set(answers)  # all 40 on one replica: 1 chance in 2^39
        await a.stop(None)
        assert {await _answer(target) for _ in range(10)} == {"b"}
    finally:
        await a.stop(None)
        await b.stop(None)
