"""YAML on the object routes: a body sent as `application/yaml` is read as its JSON twin would be, and a read that
asks for YAML (`Accept: application/yaml`) gets the same document the JSON read shows, write-only values as their
digest. The web console edits objects as YAML with no YAML library of its own: the server is its one parser."""

from __future__ import annotations

from typing import Any

import yaml
from starlette.requests import Request
from starlette.responses import Response

from meshplane.model.resource import Resource
from meshplane.server.problems import Problem

YAML = "application/yaml"
YAML_TYPES = frozenset({YAML, "application/x-yaml", "text/yaml"})


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, with what JSON cannot say refused or kept as text: an alias (a few lines of them can
    stand for a document too large to check) is an error, a date stays the string it is written as."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", mark)
        return super().compose_node(parent, index)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)


def is_yaml(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() in YAML_TYPES


def parse_yaml(body: bytes) -> Any:
    """One YAML document; a 400 naming the line (and column) of what does not parse."""
    try:
        return yaml.load(body, Loader=_Loader)  # a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = exc.problem + (f" ({exc.context})" if exc.context else "") if exc.problem else exc.context
        raise Problem(400, f"the body is not valid YAML{where}: {what}") from None
    except yaml.YAMLError as exc:
        raise Problem(400, f"the body is not valid YAML: {exc}") from None


def _quality(entry: str) -> float:
    for parameter in entry.split(";")[1:]:
        key, _, value = parameter.strip().partition("=")
        if key.strip() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


def wants_yaml(request: Request) -> bool:
    """Whether the request's Accept header prefers YAML to JSON (a tie goes to the type named first)."""
    best: tuple[float, int, bool] | None = None
    for position, entry in enumerate(request.headers.get("accept", "").split(",")):
        media = entry.split(";")[0].strip().lower()
        yaml_type = media in YAML_TYPES
        if not yaml_type and media not in ("application/json", "application/*", "*/*"):
            continue
        rank = (_quality(entry), -position, yaml_type)
        if rank[0] > 0 and (best is None or rank[:2] > best[:2]):
            best = rank
    return best is not None and best[2]


def yaml_read(kind: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` entry of a read of `kind` that may also answer YAML."""
    return {200: {"content": {YAML: {"schema": {"$ref": f"#/components/schemas/{kind}"}}}}}


def yaml_response(resource: Resource) -> Response:
    """The object as its JSON read shows it, in YAML, with its ETag."""
    text = yaml.safe_dump(resource.to_wire(), sort_keys=False, allow_unicode=True)
    headers = {"ETag": f'"{resource.metadata.resource_version}"', "Vary": "Accept"}
    return Response(text, media_type=YAML, headers=headers)
