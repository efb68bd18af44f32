"""Typed configuration of every process: TOML file (`--config`), `MESHPLANE_*` variables, then flags.

Precedence, highest first: command-line flags, environment, the TOML file, defaults. The defaults run
the embedded setup on localhost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AfterValidator, Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

LogFormat = Literal["json", "text"]


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (or `[v6]:port`) into its parts; ValueError names the bad address."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


def _address(value: str) -> str:
    split_address(value)
    return value


Address = Annotated[str, AfterValidator(_address)]


class ProcessSettings(BaseSettings):
    """What every meshplane process shares: how it logs and where its config file is."""

    model_config = SettingsConfigDict(env_prefix="MESHPLANE_", env_nested_delimiter="__", extra="forbid")
    config_file: ClassVar[Path | None] = None

    log_format: LogFormat = "json"
    log_level: str = "info"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls.config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cls.config_file))
        return tuple(sources)

    @classmethod
    def load(cls, config_file: Path | None = None, **flags: Any) -> Self:
        """Settings from the file, the environment and the flags that were given (None = not given)."""
        if config_file is not None and not config_file.is_file():
            raise FileNotFoundError(f"config file {config_file} does not exist")
        bound = type(cls.__name__, (cls,), {"config_file": config_file})
        return bound(**{k: v for k, v in flags.items() if v is not None})  # type: ignore[return-value]


class ServerSettings(ProcessSettings):
    http_address: Address = "127.0.0.1:8080"
    grpc_address: Address = "127.0.0.1:18000"
    data_dir: Path = Path(".meshplane")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite file meshplane.db in data_dir"
    )

    @property
    def store_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{(self.data_dir / 'meshplane.db').resolve()}"


class AgentSettings(ProcessSettings):
    cluster: str = "default"
    server: Address = "127.0.0.1:18000"
    state_dir: Path = Path(".meshplane-agent")
    xds_address: Address = "127.0.0.1:18001"
    gateway_address: Address = "127.0.0.1:10000"
    labels: dict[str, str] = Field(default_factory=dict)
