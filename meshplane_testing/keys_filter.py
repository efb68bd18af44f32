"""The keys filter's .wasm as scripts/build-keys-filter caches it, named by the digest of the crate's sources."""

from __future__ import annotations

import hashlib
from pathlib import Path

from meshplane_testing.kube import REPO, cache_dir
from meshplane_testing.process import MissingRequirement

CRATE = REPO / "dataplane" / "keys-filter"


def sources_digest() -> str:
    """As the build script computes it: Cargo.toml, Cargo.lock, then src/*.rs in byte order."""
    parts = [CRATE / "Cargo.toml", CRATE / "Cargo.lock", *sorted((CRATE / "src").glob("*.rs"), key=lambda p: p.name)]
    return hashlib.sha256(b"".join(path.read_bytes() for path in parts)).hexdigest()[:16]


def keys_filter_wasm() -> Path:
    """The filter built from the sources as they are; MissingRequirement (a skip, a failure in CI) when it is not."""
    wasm = cache_dir() / "keys-filter" / f"{sources_digest()}.wasm"
    if not wasm.is_file():
        raise MissingRequirement(
            f"the keys filter is not built for these sources: run scripts/build-keys-filter ({wasm})"
        )
    return wasm
