"""An HTTPRoute and a GRPCRoute on one listener with a hostname in common: the specification accepts only
one of them there, the older (then the first by namespace/name)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from meshplane.gatewayapi.attachment import Attachment
from meshplane.gatewayapi.hostnames import matches
from meshplane.gatewayapi.objects import Kind
from meshplane.gatewayapi.state import ObjectKey

CONFLICT_MESSAGE = "an older route of the other kind serves these hostnames on the listener"


@dataclass
class Candidate:
    """A route's attachments through one parentRef, before the listeners' conflicts are settled."""

    kind: Kind
    age: tuple[str, str, str]
    """(creationTimestamp, namespace, name): the smaller wins a conflict."""
    gateway: ObjectKey
    attachments: list[Attachment] = field(default_factory=list)
    lost: bool = False
    """Whether a conflict took every attachment it had."""


def _overlap(first: Sequence[str], second: Sequence[str]) -> bool:
    return any(matches(a, b) or matches(b, a) for a in first for b in second)


def settle(candidates: Sequence[Candidate]) -> None:
    """Drop each attachment that an older route of the other kind shares a hostname with, on its listener."""
    by_listener: dict[tuple[ObjectKey, str], list[tuple[Candidate, Attachment]]] = defaultdict(list)
    for candidate in candidates:
        for attachment in candidate.attachments:
            by_listener[(candidate.gateway, attachment.listener.name)].append((candidate, attachment))
    dropped: set[tuple[int, int]] = set()
    for sharing in by_listener.values():
        for candidate, attachment in sharing:
            if any(
                other.kind != candidate.kind
                and other.age < candidate.age
                and _overlap(theirs.hostnames, attachment.hostnames)
                for other, theirs in sharing
            ):
                dropped.add((id(candidate), id(attachment)))
    for candidate in candidates:
        kept = [attachment for attachment in candidate.attachments if (id(candidate), id(attachment)) not in dropped]
        if candidate.attachments and not kept:
            candidate.lost = True
        candidate.attachments = kept
