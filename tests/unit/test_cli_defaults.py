"""The defaults `meshplane … --help` names are the ones the settings use: read from them, never restated."""

from __future__ import annotations

import re

import pytest
from typer.main import get_command

from meshplane.cli import app
from meshplane.config import AgentSettings, ServerSettings
from meshplane.enforcer.settings import EnforcerSettings
from meshplane.ratelimiter.settings import RateLimiterSettings

SETTINGS = {
    ("server",): ServerSettings,
    ("agent",): AgentSettings,
    ("enforcer",): EnforcerSettings,
    ("ratelimiter",): RateLimiterSettings,
}


def _options(path: tuple[str, ...]) -> dict[str, str]:
    command = get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return {param.name: param.help or "" for param in command.params if param.name}


@pytest.mark.parametrize("path", list(SETTINGS), ids=lambda path: " ".join(path))
def test_every_default_a_help_text_names_is_the_settings_default(path: tuple[str, ...]) -> None:
    fields = SETTINGS[path].model_fields
    named = {
        option: match.group(1) for option, text in _options(path).items() if (match := re.search(r"\[([^]]*)\]$", text))
    }
    checked = {option: shown for option, shown in named.items() if option in fields}
    assert checked, "no option names a default"
    for option, shown in checked.items():
        default = fields[option].default
        assert shown == ("none" if default is None else str(default)), option
