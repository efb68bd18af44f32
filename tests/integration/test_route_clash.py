"""The server's write-time route check reads its in-memory projection; a write it has answered is in
what the next write is checked against, however soon that write comes."""

from __future__ import annotations

import pytest

from meshplane_testing.meshplane import ServerProcess


def api(base_path: str) -> dict:
    return {"spec": {"basePath": base_path, "backends": [{"host": "127.0.0.1", "port": 9}]}}


@pytest.mark.timeout(60)
def test_an_api_written_just_before_is_seen_by_the_next_writes_route_check(server: ServerProcess) -> None:
    with server.http() as client:
        for round_no in range(20):
            first = client.put(f"/v1/projects/default/apis/first-{round_no}", json=api(f"/clash{round_no}"))
            assert first.status_code == 201, first.text
            second = client.put(f"/v1/projects/default/apis/second-{round_no}", json=api(f"/clash{round_no}"))
            assert second.status_code == 409, second.text
            assert f"default/first-{round_no}" in second.json()["detail"]
            templated = client.put(f"/v1/projects/default/apis/param-{round_no}", json=api("/{tenant}"))
            if round_no == 0:
                assert templated.status_code == 409, templated.text  # meets /clash0 on its first segment
