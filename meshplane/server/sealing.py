"""Sealing write-only fields (`model.sealed`): encrypted before they are stored, opened only to be delivered.

The data key is a `DataKey`: by default AES-256-GCM with a key file in the server's data dir; a KMS plugs
in behind the same calls. Each ciphertext is bound to its object (the associated data), so one copied
into another object does not open there.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path
from typing import Protocol, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel

from meshplane.model.resource import FieldError, InvalidObject
from meshplane.model.sealed import REVEAL, Reveal, SealedValue, replace_sealed, sealed_values
from meshplane.model.stored import ObjectKey

STORED = {REVEAL: Reveal.STORED}
"""The serialization context of what the store keeps: digests and ciphertexts."""
DELIVERED = {REVEAL: Reveal.DELIVERED}
"""The serialization context of what an agent receives: the values."""

_Spec = TypeVar("_Spec", bound=BaseModel)


class DataKey(Protocol):
    """What seals values: the one place a key management service would plug in."""

    @property
    def key_id(self) -> str:
        """Names the key a ciphertext was made with (written in front of it)."""
        ...

    def encrypt(self, plaintext: bytes, associated: bytes) -> bytes: ...

    def decrypt(self, ciphertext: bytes, associated: bytes) -> bytes:
        """Raises ValueError when the ciphertext was not made by this key for this associated data."""
        ...

    def digest(self, plaintext: bytes) -> bytes:
        """A keyed hash: what a read shows, so equal values look equal and a guessed one cannot be checked."""
        ...


class FileDataKey:
    """AES-256-GCM under a 32-byte key kept in one file (mode 0600): made on first use when `create`, else
    one given (a Secret every replica mounts) that must be there."""

    def __init__(self, path: Path, create: bool = True):
        self._key = _load_or_make(path) if create else _load(path)
        self._cipher = AESGCM(self._key)
        self._hash_key = hashlib.sha256(b"meshplane sealed-value digest\0" + self._key).digest()
        self._id = hashlib.sha256(self._key).hexdigest()[:12]

    @property
    def key_id(self) -> str:
        return self._id

    def encrypt(self, plaintext: bytes, associated: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._cipher.encrypt(nonce, plaintext, associated)

    def decrypt(self, ciphertext: bytes, associated: bytes) -> bytes:
        try:
            return self._cipher.decrypt(ciphertext[:12], ciphertext[12:], associated)
        except InvalidTag:
            raise ValueError("the ciphertext does not open with this key for this field") from None

    def digest(self, plaintext: bytes) -> bytes:
        return hmac.new(self._hash_key, plaintext, hashlib.sha256).digest()


def _load(path: Path) -> bytes:
    key = path.read_bytes()
    if len(key) != 32:
        raise ValueError(f"{path} does not hold a 32-byte data key")
    return key


def _load_or_make(path: Path) -> bytes:
    try:
        return _load(path)
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = AESGCM.generate_key(bit_length=256)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another server on this data dir made it first
            return _load(path)
        with os.fdopen(fd, "wb") as file:
            file.write(key)
        return key


def data_key_of(key_file: Path | None, data_dir: Path) -> FileDataKey:
    """The server's data key: the file it is given, or the one its data dir keeps (made on first start)."""
    if key_file is not None:
        return FileDataKey(key_file, create=False)
    return FileDataKey(data_dir / "sealing" / "data-key")


class UnreadableSealedValue(ValueError):
    """A stored ciphertext this server's data key does not open (another key, or tampered with)."""


class Sealer:
    def __init__(self, data_key: DataKey):
        self.data_key = data_key

    def seal(self, key: ObjectKey, spec: _Spec, previous: BaseModel | None = None) -> _Spec:
        """`spec` with every value written in the clear encrypted, and every value given back as its digest
        (a read-modify-write) kept from `previous`, the stored spec (InvalidObject when it is not there)."""
        kept = {value.digest: value for _, value in sealed_values(previous)} if previous is not None else {}
        errors: list[FieldError] = []

        def sealed(path: str, value: SealedValue) -> SealedValue:
            if value.plaintext is not None:
                return self._encrypt(key, value.plaintext)
            if (stored := kept.get(value.digest)) is None:
                errors.append(FieldError(path=f"spec.{path}", message="matches no stored value: write the value"))
                return value
            return self._encrypt(key, self._decrypt(key, stored))

        result = replace_sealed(spec, sealed)
        if errors:
            raise InvalidObject(errors)
        return result

    def open(self, key: ObjectKey, spec: _Spec) -> _Spec:
        """`spec` with every sealed value decrypted, to be delivered (raises UnreadableSealedValue)."""
        return replace_sealed(
            spec, lambda path, value: value.model_copy(update={"plaintext": self._decrypt(key, value)})
        )

    def _encrypt(self, key: ObjectKey, plaintext: str) -> SealedValue:
        data = plaintext.encode()
        sealed = self.data_key.encrypt(data, _associated(key))
        return SealedValue(
            digest="hmac-sha256:" + self.data_key.digest(data).hex(),
            ciphertext=f"{self.data_key.key_id}:{base64.b64encode(sealed).decode()}",
        )

    def _decrypt(self, key: ObjectKey, value: SealedValue) -> str:
        key_id, _, body = (value.ciphertext or "").partition(":")
        if key_id != self.data_key.key_id:
            raise UnreadableSealedValue(f"sealed with data key {key_id!r}, not this server's")
        try:
            return self.data_key.decrypt(base64.b64decode(body), _associated(key)).decode()
        except ValueError as exc:
            raise UnreadableSealedValue(str(exc)) from None


def _associated(key: ObjectKey) -> bytes:
    return "\0".join(key).encode()
