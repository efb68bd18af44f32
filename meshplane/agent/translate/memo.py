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
from typing import Concatenate, Generic, ParamSpec, TypeVar

Obj = TypeVar("Obj")
Result = TypeVar("Result")
Args = ParamSpec("Args")


class IdentityMemo(Generic[Obj, Args, Result]):
    """`function(obj, *args)` kept per (object, args): `obj` must be immutable (a frozen model) and able to
    be weakly referenced; the other arguments hashable values."""

    def __init__(self, function: Callable[Concatenate[Obj, Args], Result]) -> None:
        self._function = function
        self._results: dict[int, tuple[weakref.ref[Obj], dict[Hashable, Result]]] = {}
        functools.update_wrapper(self, function)

    def __call__(self, obj: Obj, *args: Args.args, **kwargs: Args.kwargs) -> Result:
        key = id(obj)
        entry = self._results.get(key)
        if entry is None or entry[0]() is not obj:
            entry = (weakref.ref(obj, functools.partial(self._forget, key)), {})
            self._results[key] = entry
        call = (args, tuple(sorted(kwargs.items())))
        results = entry[1]
        if call not in results:
            results[call] = self._function(obj, *args, **kwargs)
        return results[call]

    def _forget(self, key: int, ref: weakref.ref[Obj]) -> None:
        entry = self._results.get(key)
        if entry is not None and entry[0] is ref:
            del self._results[key]

    def __len__(self) -> int:
        """Objects whose results are kept (they are alive)."""
        return len(self._results)


def by_identity(function: Callable[Concatenate[Obj, Args], Result]) -> IdentityMemo[Obj, Args, Result]:
    """Decorate a pure function of a frozen object (and hashable arguments) to compute once per object."""
    return IdentityMemo(function)
