"""What a delta client has ACKed, kept as its difference from what it was sent.

Once a client has answered every response the two are the same, so a stream holding hundreds of
resources keeps one name -> version map, not two.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class AckedVersions(Mapping[str, str]):
    """A read-only name -> version view over `sent`, corrected by the names whose ACKed version differs.

    The owner of `sent` calls `sending` before it changes a name there, `settle` when the client ACKs
    a version of it (None: its removal), and `forget` when it drops the name from `sent` for good.
    """

    __slots__ = ("_differs", "_sent")

    def __init__(self, sent: Mapping[str, str]) -> None:
        self._sent = sent
        self._differs: dict[str, str | None] = {}
        """name -> the version the client ACKed, None when it holds none, wherever that is not `sent`'s."""

    def sending(self, name: str) -> None:
        if name not in self._differs:
            self._differs[name] = self._sent.get(name)

    def settle(self, name: str, version: str | None) -> None:
        if self._sent.get(name) == version:
            self._differs.pop(name, None)
        else:
            self._differs[name] = version

    def forget(self, name: str) -> None:
        self._differs.pop(name, None)

    def __getitem__(self, name: str) -> str:
        version = self._differs[name] if name in self._differs else self._sent[name]
        if version is None:
            raise KeyError(name)
        return version

    def __iter__(self) -> Iterator[str]:
        differs = self._differs
        for name in self._sent:
            if name not in differs or differs[name] is not None:
                yield name
        for name, version in differs.items():
            if version is not None and name not in self._sent:
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)
