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

_ENV = re.compile(
    r"\$\$\{"
    r"|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>(?:[^}$]|\$(?!\{))*))?\}"
    r"|\$\{(?P<other>[A-Za-z_][A-Za-z0-9_]*)?[^}]*\}?"
)
"""What a ``${`` starts: ``$${`` (a literal ``${``), ``${NAME}`` or ``${NAME:-default}`` (the
two forms read), else any other to its ``}`` (a shell's ``${NAME-x}`` or ``${NAME:?}``, an
unclosed ``${NAME``, a nested default): refused, since left as it is it would become the value
(a camera's password), and its name, if one follows, kept for the message."""
_TYPED_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"}
"""What a whole ``${VAR}`` may read as, for a key that refuses text (:func:`_validate`)."""
_INT_KEY = re.compile(r"-?[0-9]{1,20}")
"""How pydantic writes an integer key of a mapping in a loc (:func:`_key_in`)."""
_KEY = "[key]"
"""The last part pydantic adds to the loc of an error in a mapping's key."""
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


def _shown(node: yaml.Node, loc: Loc) -> str:
    """How a message quotes ``node``'s value: clipped, and never under a secret key."""
    secret = any(part in _SECRET_KEYS for part in loc)
    plain = isinstance(node, yaml.ScalarNode) and not secret
    return repr(_clip(node.value)) if plain else "the value"


def _unresolved(match: re.Match[str]) -> str:
    """Why a ``${...}`` was not replaced; it names the variable, never a value or the text
    around it (a password's other characters)."""
    name = match.group("name")
    if name is not None:
        return f"environment variable {name} is not set (write ${{{name}:-default}} for a default)"
    other = match.group("other")
    example = other or "NAME"
    return (
        f"unsupported interpolation ${{{other or ''}...}}: write ${{{example}}} or "
        f"${{{example}:-default}}, or $${{ for a literal ${{"
    )


class _Document:
    """Plain data built from YAML nodes, with the line of every key path."""

    def __init__(self) -> None:
        self.data: Any = None
        self.lines: dict[Loc, int] = {}
        self.issues: list[ConfigIssue] = []
        self.from_env: dict[Loc, tuple[str, Any]] = {}
        """Values that were one whole ``${VAR}``: their text and the number or boolean that
        text reads as in YAML (:func:`_validate`)."""
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
        """The keys written in ``node``, and those its ``<<`` merges where none is written.

        YAML's merge as PyYAML reads it: a key written wins wherever it stands, so it is
        no duplicate of a merged one; only the keys written are checked for duplicates.
        """
        result: dict[Any, Any] = {}
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.append(value_node)
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
            self.lines.setdefault(path, line)  # a merge, built after, keeps the line written
            result[key] = self.build(value_node, path)
        return {**self._merged(merges, loc), **result}

    def _merged(self, merges: list[yaml.Node], loc: Loc) -> dict[Any, Any]:
        """What the ``<<`` values ``merges`` bring in, as PyYAML merges them.

        Each is a mapping or a list of mappings; a later ``<<`` wins over an earlier one,
        and the first mapping of a list over the next. They are built in that order of
        precedence, so that a key's line is that of the mapping its value comes from.
        """
        parts: list[yaml.Node] = []  # least precedence first
        for value_node in merges:
            items = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            parts.extend(reversed(items))
        built: list[dict[Any, Any]] = []
        for part in reversed(parts):
            if isinstance(part, yaml.MappingNode):
                built.append(self._mapping(part, loc))
                continue
            message = f"cannot merge {_shown(part, loc)}: << takes a mapping or a list of mappings"
            self.issues.append(ConfigIssue(format_path(loc), part.start_mark.line + 1, message))
        merged: dict[Any, Any] = {}
        for mapping in reversed(built):
            merged.update(mapping)
        return merged

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
            message = f"cannot read {_shown(node, loc)} as {tag}{why}"
            self.issues.append(ConfigIssue(format_path(loc), node.start_mark.line + 1, message))
            return _UNREADABLE

    def _interpolate(self, value: str, loc: Loc, line: int) -> str:
        """``value`` with each ``${...}`` replaced: by the variable, else its default; an unset
        variable without one, or a form not read, is an issue (:func:`_unresolved`).

        The replacement is one pass over what the file says: a variable's value is never
        read for ``${``, so a password may hold one.
        """

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group("name", "default")
            if name is None and match.group(0) == "$${":
                return "${"
            if name is not None and name in os.environ:
                return os.environ[name]
            if name is not None and default is not None:
                return default
            self.issues.append(ConfigIssue(format_path(loc), line, _unresolved(match)))
            return ""

        text = _ENV.sub(substitute, value)
        whole = _ENV.fullmatch(value)
        if whole is not None and whole["name"] is not None:
            self._note_typed(text, loc)
        return text

    def _note_typed(self, text: str, loc: Loc) -> None:
        """Note the number or boolean ``text`` reads as in YAML (``8080``, ``true``), if any:
        ``port: ${PORT}`` then reads as ``port: 8080`` would, where the key refuses text.
        Quoted or not: a variable has no type to keep, and in a flow mapping
        (``{port: '${PORT}'}``) the quotes are needed.

        Only a scalar's tag is resolved, never a structure: a value cannot change the file's.
        """
        tag = self._constructor.resolve(yaml.ScalarNode, text, (True, False))
        if tag not in _TYPED_TAGS:
            return
        try:
            scalar = self._constructor.construct_object(yaml.ScalarNode(tag, text), deep=True)
        except ValueError:  # an integer of over 4300 digits: left as text, refused as text
            return
        self.from_env[loc] = (text, scalar)


def parse_yaml(text: str, source: str | None = None) -> _Document:
    """The data in ``text``, the line of each key path and the values from a whole ``${VAR}``;
    raises :class:`ConfigError`."""
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
    document.data = document.build(node, ())
    if document.issues:
        raise ConfigError(document.issues, source)
    return document


def _too_long() -> str:
    return f"larger than {MAX_CONFIG_BYTES // 2**20} MiB (a pipelines file takes a few KiB)"


def _line_of(loc: Loc, lines: Mapping[Loc, int]) -> int | None:
    """The line of the deepest part of ``loc`` present in the file."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


_ABSENT = object()
"""What :func:`_key_in` gives for a part of a loc that is no key or index of the data."""


def _key_in(data: Any, part: str | int) -> Any:
    """The key or index of ``data`` that ``part`` names, else :data:`_ABSENT`.

    pydantic names a mapping's integer key as text where a validator made the keys
    text (``class_names: {0: person}``).
    """
    if isinstance(data, dict):
        if part in data:
            return part
        if isinstance(part, str) and _INT_KEY.fullmatch(part) and int(part) in data:
            return int(part)
    elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
        return part
    return _ABSENT


def _data_loc(loc: Loc, data: Any) -> tuple[Loc, bool]:
    """``loc`` as a key path of ``data``, and whether its last part named a union's member.

    pydantic adds parts the data has no key for, which the user never wrote: a tagged
    union's tag (a sink's ``type``), a plain union's member (``list[...]`` and
    ``dict[...]`` in ``class_names``) and ``[key]`` after a key it refuses; they are left
    out. A member's name is no identifier, as every field's is: a part that names a key
    the data lacks (a missing key, a default checked) is kept.
    """
    kept: list[str | int] = []
    member = False
    for part in loc:
        key = _key_in(data, part)
        if key is _ABSENT and isinstance(part, str):
            tag = isinstance(data, dict) and data.get("type") == part
            member = not part.isidentifier() and part != _KEY
            if tag or member or part == _KEY:
                continue
        member = False
        kept.append(part)
        data = None if key is _ABSENT else data[key]
    return tuple(kept), member


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
    """pydantic's errors as config issues with key paths and lines.

    When every member of a union refuses a value, each says why: the member of the
    value's shape (a list for a list) what is wrong inside it, the others only that the
    value is not of their type ("should be a valid dictionary"). Those are left out
    where another error lies at or below the same key, which says more.
    """
    located = []
    for error in exc.errors(include_url=False):
        loc, member = _data_loc(tuple(error["loc"]), data)
        if error["type"] == "union_tag_invalid":
            loc = (*loc, "type")
        located.append((error, loc, member and error["type"].endswith("_type")))
    explained = {loc[:end] for _, loc, other in located if not other for end in range(len(loc) + 1)}
    issues: dict[ConfigIssue, None] = {}
    for error, loc, other in located:
        if not (other and loc in explained):
            message = _message(error, loc, model, data)
            issues.setdefault(ConfigIssue(format_path(loc), _line_of(loc, lines), message))
    return list(issues)


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
    document = parse_yaml(text, source)
    data = document.data
    if not isinstance(data, dict):
        raise ConfigError([ConfigIssue("", 1, "must be a mapping with a 'pipelines' key")], source)
    for key_path, value in (overrides or {}).items():
        _override(data, key_path, value)
    return parse_data(
        data, base_dir=base_dir, lines=document.lines, source=source, from_env=document.from_env
    )


def _override(data: dict[Any, Any], key_path: Loc, value: Any) -> None:
    """Set ``value`` at ``key_path`` in ``data``, making the sections on the way.

    A section the file has but not as a mapping (``server:`` with each of its lines
    commented out) is left as it is: validation refuses it with the line ``vstream
    validate`` gives, where setting a key in it would crash.
    """
    node: Any = data
    for part in key_path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            return
    node[key_path[-1]] = value


def parse_data(
    data: Any,
    *,
    base_dir: Path | None = None,
    lines: Mapping[Loc, int] | None = None,
    source: str | None = None,
    from_env: Mapping[Loc, tuple[str, Any]] | None = None,
) -> VstreamConfig:
    """Validate a config document given as data (what YAML or the CLI flags describe).

    ``from_env``: the values that were one whole ``${VAR}`` (:func:`_validate`).
    """
    try:
        return _validate(data, {"base_dir": base_dir or Path.cwd()}, from_env or {})
    except ValidationError as exc:
        raise ConfigError(issues_from(exc, data, lines or {}, VstreamConfig), source) from None
    except OSError as exc:
        raise ConfigError([_path_issue(exc)], source) from None


def _validate(
    data: Any, context: dict[str, Any], from_env: Mapping[Loc, tuple[str, Any]]
) -> VstreamConfig:
    """``data`` validated, a whole ``${VAR}`` read as YAML would read its text in its place
    where the key refuses text: ``port: ${PORT}`` as ``port: 8080``, ``loop: ${LOOP}`` as
    ``loop: true``.

    The key decides, since YAML alone would make a password of digits a number, which a
    text key refuses: a value goes back to text where the key refuses its number too for
    its type, so that the error, if any, is about the text. Each value changes at most
    twice, so this ends; a config without an error is validated once.
    """
    retyped: set[Loc] = set()
    while True:
        try:
            return VstreamConfig.model_validate(data, context=context)
        except ValidationError as exc:
            if not _retype(exc, data, from_env, retyped):
                raise


def _retype(
    exc: ValidationError,
    data: Any,
    from_env: Mapping[Loc, tuple[str, Any]],
    retyped: set[Loc],
) -> bool:
    """Change the values from ``${VAR}`` that ``exc`` refuses (see :func:`_validate`): text to
    its number or boolean once, back where that is refused for its type; whether any changed.
    A value a ``vstream serve`` flag replaced is not the text noted, and is left alone."""
    for_its_type: dict[Loc, bool] = {}  # each refused value: whether for its type
    for error in exc.errors(include_url=False):
        loc = _data_loc(tuple(error["loc"]), data)[0]
        if loc in from_env:
            for_its_type[loc] = for_its_type.get(loc, False) or error["type"].endswith("_type")
    changed = False
    for loc, wrong_type in for_its_type.items():
        text, scalar = from_env[loc]
        if loc not in retyped:
            retyped.add(loc)
            changed |= _swap(data, loc, text, scalar)
        elif wrong_type:
            changed |= _swap(data, loc, scalar, text)
    return changed


def _swap(data: Any, loc: Loc, old: Any, new: Any) -> bool:
    """Put ``new`` at ``loc`` in ``data`` if ``old`` itself is there; whether it was."""
    parent = data
    for part in loc[:-1]:
        key = _key_in(parent, part)
        parent = None if key is _ABSENT else parent[key]
    key = _key_in(parent, loc[-1])
    if key is _ABSENT or parent[key] is not old:
        return False
    parent[key] = new
    return True


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
