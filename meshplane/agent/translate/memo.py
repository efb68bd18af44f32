"""Results of pure functions of frozen model objects, found again by the object's identity.

The agent keeps the objects it holds from one rebuild to the next and replaces only those a change
brings, so what the translator derives from an unchanged object it can derive once: a result lives as
long as its object does (a weak reference drops it with the object), and is never recomputed from a
copy that merely compares equal.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Obj = TypeVar("Obj")
Result = TypeVar("Result")


class IdentityMemo(Generic[Obj, Result]):
    """`function(obj, *args)` kept per object, for the last arguments it was asked with: `obj` must be
    immutable (a frozen model) and able to be weakly referenced; the other arguments, positional, hashable
    values. One result per object, so arguments that change over an object's life (what is entitled to an
    API) replace the result instead of piling up beside it."""

    def __init__(self, function: Callable[..., Result]) -> None:
        self._function = function
        self._results: dict[int, tuple[weakref.ref[Obj], Hashable, Result]] = {}
        functools.update_wrapper(self, function)

    def __call__(self, obj: Obj, *args: Hashable) -> Result:
        key = id(obj)
        entry = self._results.get(key)
        if entry is not None and entry[0]() is obj:
            if entry[1] == args:
                return entry[2]
            ref = entry[0]
        else:
            ref = weakref.ref(obj, functools.partial(self._forget, key))
        result = self._function(obj, *args)
        self._results[key] = (ref, args, result)
        return result

    def _forget(self, key: int, ref: weakref.ref[Obj]) -> None:
        entry = self._results.get(key)
        if entry is not None and entry[0] is ref:
            del self._results[key]

    def __len__(self) -> int:
        """Objects whose results are kept (they are alive)."""
        return len(self._results)


def by_identity(function: Callable[..., Result]) -> IdentityMemo[Obj, Result]:
    """Decorate a pure function of a frozen object (and hashable arguments) to compute once per object."""
    return IdentityMemo(function)
