"""Reading a pipelines file: YAML with line numbers, ``${ENV}`` interpolation, precise errors.

The YAML is composed into nodes first so that every key and item keeps the
line it came from; pydantic's error locations are then mapped back to those
lines. Interpolation happens on string scalars only, after parsing, so a
secret's content can never change the structure of the file.

The file and what its aliases expand to are bounded before any of it is
built (:class:`_BoundedLoader`): a few hundred bytes of nested aliases (a
"billion laughs") would otherwise expand to gigabytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from vstream.config.pipelines import VstreamConfig
from vstream.config.sinks import SINK_TYPES
from vstream.config.sources import SourceConfig
from vstream.errors import VstreamError
from vstream.uri import redact_uri

Loc = tuple[str | int, ...]

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_MERGE_TAG = "tag:yaml.org,2002:merge"
_SECRET_KEYS = {"password", "token", "headers", "username"}
"""Keys whose values are never quoted in an error."""

MAX_CONFIG_BYTES = 4 * 2**20
"""Largest pipelines file read: 100 000 labels or 10 000 sources take under 2 MiB."""
MAX_YAML_VALUES = 1_000_000
"""Most values (scalars, lists, mappings) in a document, an alias counted as what it expands to."""
MAX_YAML_TEXT = 16 * 2**20
"""Most characters of scalars in a document, aliases expanded (interpolation copies each use)."""
MAX_YAML_DEPTH = 64
"""Deepest nesting, aliases expanded; a config needs about 10 levels."""


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config: where (key path, line) and what."""

    path: str
    line: int | None
    message: str

    def format(self, source: str | None = None) -> str:
        place = f"{source}:{self.line}: " if source and self.line else ""
        where = f"{self.path}: " if self.path else ""
        return f"{place}{where}{self.message}"


class ConfigError(VstreamError):
    """A config that cannot be used; ``issues`` lists every problem found."""

    def __init__(self, issues: list[ConfigIssue], source: str | None = None) -> None:
        self.issues = issues
        self.source = source
        first = issues[0].format(source)
        more = f" (and {len(issues) - 1} more; see vstream validate)" if len(issues) > 1 else ""
        super().__init__(first + more)

    def lines(self) -> list[str]:
        return [issue.format(self.source) for issue in self.issues]


def format_path(loc: Loc) -> str:
    """``('pipelines', 0, 'sinks')`` -> ``pipelines[0].sinks``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class _TooLarge(yaml.MarkedYAMLError):
    """A document past one of the bounds above: refused as it is composed, before it is built."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader whose composer measures each node as it is made.

    A node's measure is what building it costs once its aliases are expanded
    (values, scalar characters, depth), summed from its children's, which are
    composed first: so an alias bomb is refused from the size of the node graph,
    however far it would expand, and an alias to a node that contains it (which
    would expand forever) is refused as it is read.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._measures: dict[yaml.Node, tuple[int, int, int]] = {}
        self._open: list[yaml.Node | None] = []
        """The parents of the nodes being composed, outermost first."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        mark = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):
            target = self.anchors.get(self.peek_event().anchor)
            if target is not None and (target is parent or any(target is n for n in self._open)):
                raise _TooLarge(
                    problem="an alias refers to a node that contains it", problem_mark=mark
                )
            return super().compose_node(parent, index)
        if len(self._open) >= MAX_YAML_DEPTH:
            raise _TooLarge(
                problem=f"nested deeper than {MAX_YAML_DEPTH} levels", problem_mark=mark
            )
        self._open.append(parent)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._open.pop()
        if node is not None:  # PyYAML's composer always makes one; its type says "or None"
            self._measure(node, mark)
        return node

    def _measure(self, node: yaml.Node, mark: yaml.Mark) -> None:
        if isinstance(node, yaml.ScalarNode):
            measure = (1, len(node.value), 1)
        else:
            children = (
                [n for pair in node.value for n in pair]
                if isinstance(node, yaml.MappingNode)
                else node.value
            )
            parts = [self._measures[child] for child in children]
            measure = (
                1 + sum(p[0] for p in parts),
                sum(p[1] for p in parts),
                1 + max((p[2] for p in parts), default=0),
            )
        values, text, depth = measure
        if values > MAX_YAML_VALUES:
            problem = f"its aliases expand to more than {MAX_YAML_VALUES:,} values"
        elif text > MAX_YAML_TEXT:
            problem = f"its aliases expand to more than {MAX_YAML_TEXT // 2**20} MiB of text"
        elif depth > MAX_YAML_DEPTH:
            problem = f"its aliases nest deeper than {MAX_YAML_DEPTH} levels"
        else:
            self._measures[node] = measure
            return
        raise _TooLarge(problem=f"{problem} (refused: an alias bomb?)", problem_mark=mark)


_UNREADABLE = object()
"""What :meth:`_Document._scalar` gives for a value it could not build (an issue says why)."""


def _clip(text: str) -> str:
    """``text`` cut to 40 characters: a value quoted in a message (a 5000-digit number)."""
    return text if len(text) <= 40 else text[:37] + "..."


class _Document:
    """Plain data built from YAML nodes, with the line of every key path."""

    def __init__(self) -> None:
        self.lines: dict[Loc, int] = {}
        self.issues: list[ConfigIssue] = []
        self._constructor = yaml.SafeLoader("")

    def build(self, node: yaml.Node, loc: Loc) -> Any:
        self.lines.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, loc)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*loc, i)) for i, item in enumerate(node.value)]
        value = self._scalar(node, loc)
        if isinstance(value, str) and "${" in value:
            return self._interpolate(value, loc, node.start_mark.line + 1)
        return value

    def _mapping(self, node: yaml.MappingNode, loc: Loc) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged = self.build(value_node, loc)
                for part in merged if isinstance(merged, list) else [merged]:
                    if isinstance(part, dict):
                        for key, value in part.items():
                            result.setdefault(key, value)
                continue
            key = self._scalar(key_node, loc)
            if key is _UNREADABLE:
                continue
            if isinstance(key, bool) and isinstance(key_node, yaml.ScalarNode):
                # YAML 1.1 reads a plain on/off/yes/no as a boolean; as a key it is a name
                # (a secondary model's ``on:``), so it is kept as written.
                key = key_node.value
            if not isinstance(key, str | int) or isinstance(key, bool):
                self.issues.append(
                    ConfigIssue(format_path(loc), key_node.start_mark.line + 1, "keys must be text")
                )
                continue
            line = key_node.start_mark.line + 1
            path = (*loc, key)
            if key in result:
                self.issues.append(ConfigIssue(format_path(path), line, "duplicate key"))
            self.lines[path] = line
            result[key] = self.build(value_node, path)
        return result

    def _scalar(self, node: yaml.Node, loc: Loc) -> Any:
        """The value of a scalar (or a key), else an issue and :data:`_UNREADABLE`.

        PyYAML raises as it builds a value its tag promises and Python refuses:
        ValueError for an integer of over 4300 digits (Python's limit) or a date
        that is none (``2024-13-45``), ConstructorError for an unknown tag
        (``!!foo``), AttributeError for ``!!timestamp`` on text that is not one.
        """
        try:
            return self._constructor.construct_object(node, deep=True)
        except (ValueError, AttributeError, yaml.YAMLError) as exc:
            if node.tag not in self._constructor.yaml_constructors:
                why = ": unknown tag"
            elif isinstance(exc, ValueError):  # its first clause: not Python's advice after it
                why = ": " + str(exc).split(";")[0]
            else:
                why = f": {exc.problem}" if isinstance(exc, yaml.MarkedYAMLError) else ""
            tag = node.tag.replace("tag:yaml.org,2002:", "!!", 1)
            secret = any(part in _SECRET_KEYS for part in loc)
            plain = isinstance(node, yaml.ScalarNode) and not secret
            shown = repr(_clip(node.value)) if plain else "the value"
            message = f"cannot read {shown} as {tag}{why}"
            self.issues.append(ConfigIssue(format_path(loc), node.start_mark.line + 1, message))
            return _UNREADABLE

    def _interpolate(self, value: str, loc: Loc, line: int) -> str:
        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            self.issues.append(
                ConfigIssue(
                    format_path(loc),
                    line,
                    f"environment variable {name} is not set (write ${{{name}:-default}} "
                    "for a default)",
                )
            )
            return ""

        return _ENV.sub(substitute, value)


def parse_yaml(text: str, source: str | None = None) -> tuple[Any, dict[Loc, int]]:
    """The data in ``text`` and the line of each key path; raises :class:`ConfigError`."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError([ConfigIssue("", None, _too_long())], source)
    try:
        node = yaml.compose(text, Loader=_BoundedLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = mark.line + 1 if mark is not None else None
        message = problem if isinstance(exc, _TooLarge) else f"invalid YAML: {problem}"
        raise ConfigError([ConfigIssue("", line, message)], source) from None
    if node is None:
        raise ConfigError([ConfigIssue("", 1, "the file is empty")], source)
    document = _Document()
    data = document.build(node, ())
    if document.issues:
        raise ConfigError(document.issues, source)
    return data, document.lines


def _too_long() -> str:
    return f"larger than {MAX_CONFIG_BYTES // 2**20} MiB (a pipelines file takes a few KiB)"


def _line_of(loc: Loc, lines: Mapping[Loc, int]) -> int | None:
    """The line of the deepest part of ``loc`` present in the file."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _data_loc(loc: Loc, data: Any) -> Loc:
    """``loc`` without the tags pydantic adds for tagged unions (a sink's ``type``)."""
    kept: list[str | int] = []
    for part in loc:
        if isinstance(data, dict) and part not in data and data.get("type") == part:
            continue
        kept.append(part)
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            data = None
    return tuple(kept)


def _allowed_keys(model: type[BaseModel], loc: Loc, data: Any) -> list[str] | None:
    """The keys the model at ``loc`` accepts, to suggest them for an unknown key."""
    annotation: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            data = data[part] if isinstance(data, list) and 0 <= part < len(data) else None
            continue
        current = _model_in(annotation, data)
        field = current.model_fields.get(part) if current is not None else None
        if field is None or not isinstance(data, dict):
            return None
        annotation, data = field.annotation, data.get(part)
    current = _model_in(annotation, data)
    if current is None:
        return None
    fields = current.model_fields
    return sorted(fields, key=lambda name: not fields[name].is_required())


def _model_in(annotation: Any, data: Any) -> Any:
    """The BaseModel class inside ``list[X]``, ``X | None`` or a tagged union, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) + getattr(annotation, "__metadata__", ()):
        found = _model_in(arg, data)
        if found is None:
            continue
        tag = found.model_fields.get("type")
        if tag is None or not isinstance(data, dict) or data.get("type") in tag.annotation.__args__:
            return found
    return None


def _message(error: Mapping[str, Any], loc: Loc, model: type[BaseModel], data: Any) -> str:
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc, data)
        hint = f"; expected one of: {', '.join(allowed)}" if allowed else ""
        return f"unknown key {loc[-1]!r}{hint}"
    if kind == "missing":
        return f"missing required key {loc[-1]!r}"
    if kind == "union_tag_invalid":
        return f"unknown sink type {error['ctx']['tag']!r}; choose from {', '.join(SINK_TYPES)}"
    if kind == "union_tag_not_found":
        return f"missing key 'type'; choose from {', '.join(SINK_TYPES)}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind.endswith(("_type", "_parsing", "enum", "literal_error")) or kind in (
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "string_pattern_mismatch",
        "too_short",
        "too_long",
        "finite_number",
    ):
        secret = any(part in _SECRET_KEYS for part in loc)
        shown = redact_uri(value) if isinstance(value, str) else value
        if isinstance(shown, str) and len(shown) > 80:
            shown = shown[:77] + "..."
        if not secret and not isinstance(shown, dict | list):
            message += f" (got {shown!r})"
    return message


def issues_from(
    exc: ValidationError,
    data: Any,
    lines: Mapping[Loc, int],
    model: type[BaseModel],
) -> list[ConfigIssue]:
    """pydantic's errors as config issues with key paths and lines."""
    issues: list[ConfigIssue] = []
    for error in exc.errors(include_url=False):
        loc = _data_loc(tuple(error["loc"]), data)
        if error["type"] == "union_tag_invalid":
            loc = (*loc, "type")
        issue = ConfigIssue(
            format_path(loc),
            _line_of(loc, lines),
            _message(error, loc, model, data),
        )
        if issue not in issues:
            issues.append(issue)
    return issues


def load_config(
    path: str | Path, overrides: Mapping[tuple[str | int, ...], Any] | None = None
) -> VstreamConfig:
    """Read and validate a pipelines file; every problem is in the :class:`ConfigError`.

    ``overrides`` set values by key path before validation (``vstream serve
    --port 0`` sets ``("server", "port")``), so they are checked like the file.
    """
    path = Path(path)
    try:
        with path.open("rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)  # bounded: the path may be /dev/zero
    except OSError as exc:
        raise VstreamError(f"cannot read config {path}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise VstreamError(f"cannot read config {path}: {_too_long()}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise VstreamError(f"cannot read config {path}: not UTF-8 text") from None
    return parse_config(text, source=str(path), base_dir=path.resolve().parent, overrides=overrides)


def parse_config(
    text: str,
    *,
    source: str | None = None,
    base_dir: Path | None = None,
    overrides: Mapping[tuple[str | int, ...], Any] | None = None,
) -> VstreamConfig:
    """Validate a pipelines file given as text (see :func:`load_config`)."""
    data, lines = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError([ConfigIssue("", 1, "must be a mapping with a 'pipelines' key")], source)
    for key_path, value in (overrides or {}).items():
        node = data
        for part in key_path[:-1]:
            node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
        node[key_path[-1]] = value
    return parse_data(data, base_dir=base_dir, lines=lines, source=source)


def parse_data(
    data: Any,
    *,
    base_dir: Path | None = None,
    lines: Mapping[Loc, int] | None = None,
    source: str | None = None,
) -> VstreamConfig:
    """Validate a config document given as data (what YAML or the CLI flags describe)."""
    try:
        return VstreamConfig.model_validate(data, context={"base_dir": base_dir or Path.cwd()})
    except ValidationError as exc:
        raise ConfigError(issues_from(exc, data, lines or {}, VstreamConfig), source) from None
    except OSError as exc:
        raise ConfigError([_path_issue(exc)], source) from None


def _path_issue(exc: OSError) -> ConfigIssue:
    """A path check the system could not even answer (a name over 255 bytes): bad input.

    Checks that know their key turn such errors into messages of their own;
    this is the one line for any other, instead of a crash.
    """
    name = str(exc.filename) if exc.filename is not None else ""
    shown = f" {name[:77]}..." if len(name) > 80 else f" {name}" if name else ""
    return ConfigIssue("", None, f"cannot check path{shown}: {exc.strerror or exc}")


def parse_source(
    data: Any, *, base_dir: Path | None = None, allowed_paths: list[str] | None = None
) -> SourceConfig:
    """Validate one source given as data (``POST /streams``).

    With ``allowed_paths``, a file source must lie inside one of those directories.
    """
    context: dict[str, Any] = {"base_dir": base_dir or Path.cwd()}
    if allowed_paths is not None:
        context["allowed_paths"] = allowed_paths
    try:
        return SourceConfig.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(issues_from(exc, data, {}, SourceConfig)) from None
    except OSError as exc:
        raise ConfigError([_path_issue(exc)]) from None


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a pipelines file, for editors."""
    schema = VstreamConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "vstream pipelines"
    return schema
