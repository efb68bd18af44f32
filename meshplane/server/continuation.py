"""Continue tokens of paged lists: sealed, so a caller reads nothing in one and cannot make one up.

A token holds where the next page starts (the last object listed), encrypted and authenticated with
AES-GCM. The key is kept in the store, which every replica shares (their data directories are their
own), so a page one replica gave continues on any other. The list a token belongs to (its kind and
project) is bound to it as associated data: a token is refused by any other list.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from meshplane.server.problems import Problem
from meshplane.store.store import Store

KEY_NAME = "continue-tokens"
_NONCE = 12


def _not_ours() -> Problem:
    return Problem(400, "the continue token is not one this server issued for this list")


class ContinueTokens:
    def __init__(self, store: Store):
        self.store = store
        self._cipher: AESGCM | None = None
        self._loading = asyncio.Lock()

    async def seal(self, scope: str, position: tuple[str, str]) -> str:
        """A token for the page after `position` (project, name) of the list `scope` names."""
        nonce = os.urandom(_NONCE)
        sealed = (await self._key()).encrypt(nonce, json.dumps(position).encode(), scope.encode())
        return base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    async def open(self, scope: str, token: str) -> tuple[str, str]:
        """The position a token of list `scope` holds; 400 for anything else."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise _not_ours() from None
        if len(raw) <= _NONCE:
            raise _not_ours()
        try:
            plain = (await self._key()).decrypt(raw[:_NONCE], raw[_NONCE:], scope.encode())
        except InvalidTag:
            raise _not_ours() from None
        project, name = json.loads(plain)
        return str(project), str(name)

    async def _key(self) -> AESGCM:
        async with self._loading:
            if self._cipher is None:
                key = await self.store.server_key(KEY_NAME, lambda: AESGCM.generate_key(bit_length=256))
                self._cipher = AESGCM(key)
            return self._cipher
