"""The options every `meshplane` verb that talks to the north API takes: where it is, who calls, whom to trust."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel

DEFAULT_SERVER = "http://127.0.0.1:8080"
ServerUrl = Annotated[str, typer.Option("--server", envvar="MESHPLANE_SERVER", help="north API URL")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="MESHPLANE_TOKEN", help="bearer token")]
CaCertOpt = Annotated[
    Path | None,
    typer.Option(
        "--cacert",
        envvar="MESHPLANE_CACERT",
        help="CA certificate that vouches for an https:// --server (e.g. DATA_DIR/pki/ca.crt) [system CAs]",
    ),
]


def defaulted(text: str, settings: type[BaseModel], field: str) -> str:
    """`text` ending in the default of `settings.field`, read from the settings so that help and behaviour agree."""
    default = settings.model_fields[field].default
    return f"{text} [{'none' if default is None else default}]"
