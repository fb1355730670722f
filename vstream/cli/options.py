"""Command-line flags made from the config models, and configs made from flags.

A field of a config model marked with :class:`~vstream.config.base.Cli`
becomes a flag: its help is the field's description, its default the
field's default, its bounds are checked by the model. ``vstream run
--source X [flags]`` builds a one-pipeline, one-source config document from
the flags given and validates it like a pipelines file, so a flag can never
accept what YAML refuses, nor default to something else. Errors name the
flag: ``--decoder-threads: must be in [0, 64], got 20000``.
"""

from __future__ import annotations

import argparse
import enum
import itertools
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from vstream.config.analytics import AnalyticsConfig
from vstream.config.base import RELATIVE_TO_CONFIG, Cli, cli_marker
from vstream.config.loading import ConfigError, ConfigIssue, format_path, parse_data
from vstream.config.model import ModelConfig, PostprocessOptions, RuntimeOptions
from vstream.config.pipelines import VstreamConfig
from vstream.config.sources import SourceOptions
from vstream.uri import stream_id_for

Path_ = tuple[str | int, ...]

PIPELINE: Path_ = ("pipelines", 0)
SOURCE: Path_ = (*PIPELINE, "sources", 0)

RUN_SECTIONS: tuple[tuple[Path_, type[BaseModel]], ...] = (
    ((*PIPELINE, "model"), ModelConfig),
    ((*PIPELINE, "postprocess"), PostprocessOptions),
    ((*PIPELINE, "runtime"), RuntimeOptions),
    (SOURCE, SourceOptions),
    ((*PIPELINE, "analytics"), AnalyticsConfig),
)
"""Where the flags of ``vstream run`` land in a config document."""

SERVE_SECTIONS: tuple[tuple[Path_, type[BaseModel]], ...] = (((), VstreamConfig),)
"""Where the flags of ``vstream serve`` land: they override the file's own settings (server,
logging, processes), never its pipelines' (a list, which no flag walks into)."""


@dataclass(frozen=True)
class Option:
    """A config field that has a flag."""

    path: Path_
    field: FieldInfo
    cli: Cli

    @property
    def dest(self) -> str:
        return "option:" + ".".join(str(p) for p in self.path)


def options(sections: tuple[tuple[Path_, type[BaseModel]], ...]) -> Iterator[Option]:
    """Every field under ``sections`` that carries a :class:`Cli` marker, nested models included."""
    for prefix, model in sections:
        yield from _walk(prefix, model)


def _walk(prefix: Path_, model: type[BaseModel]) -> Iterator[Option]:
    for name, field in model.model_fields.items():
        marker = cli_marker(field)
        if marker is not None:
            yield Option((*prefix, name), field, marker)
        nested = _base_type(field.annotation)
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            yield from _walk((*prefix, name), nested)


def _base_type(annotation: Any) -> Any:
    """The first non-None type of ``X | None``, without ``Annotated``."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _base_type(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _base_type(arg)
    return annotation


def _literals(annotation: Any) -> list[Any]:
    """The values of the ``Literal`` arms of a union: the words a number field also takes."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _literals(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [value for arg in typing.get_args(annotation) for value in _literals(arg)]
    return list(typing.get_args(annotation)) if origin is typing.Literal else []


def _number(kind: type, words: list[Any]) -> Any:
    """A flag's parser for a number of ``kind``, or one of ``words`` (``auto``)."""

    def parse(text: str) -> Any:
        if text in words:
            return text
        try:
            return kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            what += "".join(f" or {word}" for word in words)
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None

    return parse


def int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be integers, e.g. 0,2; got {text!r}") from None


def _shown_default(field: FieldInfo) -> str:
    default = field.default
    if default is PydanticUndefined or default is None:
        return ""
    if isinstance(default, enum.Enum):
        default = default.value
    if isinstance(default, bool):
        return ""
    return f" (default: {default})"


def flag_help(field: FieldInfo, default: str | None = None) -> str:
    """A field's description as a flag's help, and its default (``default`` where the
    command supplies one the field lacks, as ``run`` does the demo model).

    A flag is given without a config file: the paths it takes are relative to the
    working folder (``base_dir`` is the cwd there), which the description, written
    for the file, says otherwise.
    """
    text = (field.description or "").replace(RELATIVE_TO_CONFIG, "relative to the working folder")
    return text + (f" (default: {default})" if default is not None else _shown_default(field))


def _argument(option: Option, default: str | None = None) -> dict[str, Any]:
    field = option.field
    kind = _base_type(field.annotation)
    origin = typing.get_origin(kind)
    spec: dict[str, Any] = {
        "dest": option.dest,
        "default": argparse.SUPPRESS,
        "help": flag_help(field, default),
    }
    if option.cli.metavar:
        spec["metavar"] = option.cli.metavar
    if kind is bool:
        spec["action"] = argparse.BooleanOptionalAction
    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
        spec["choices"] = [member.value for member in kind]
    elif origin is typing.Literal:
        spec["choices"] = list(typing.get_args(kind))
    elif origin is list:
        spec["type"] = int_list
    elif kind in (int, float):
        spec["type"] = _number(kind, _literals(field.annotation))
    if "metavar" not in spec and "choices" not in spec and kind is not bool:
        # argparse would show the dest, which is the option's path in the config.
        spec["metavar"] = option.cli.flag.lstrip("-").replace("-", "_").upper()
    return spec


def add_flags(
    parser: Any,
    sections: tuple[tuple[Path_, type[BaseModel]], ...],
    *,
    only: set[str] | None = None,
    defaults: Mapping[str, str] | None = None,
) -> dict[str, Option]:
    """A flag for every marked field under ``sections`` (or those named in ``only``);
    ``defaults``: the defaults the command supplies, by flag, shown in the help."""
    flags: dict[str, Option] = {}
    for option in options(sections):
        if only is not None and option.cli.flag not in only:
            continue
        shown = (defaults or {}).get(option.cli.flag)
        parser.add_argument(option.cli.flag, **_argument(option, shown))
        flags[option.cli.flag] = option
    return flags


def given(args: argparse.Namespace) -> dict[Path_, Any]:
    """The config values the user gave as flags, by their path in the document."""
    found: dict[Path_, Any] = {}
    for dest, value in vars(args).items():
        if dest.startswith("option:"):
            path = tuple(int(p) if p.isdigit() else p for p in dest[7:].split("."))
            found[path] = value
    return found


def set_path(document: dict[str, Any], path: Path_, value: Any) -> None:
    """Set ``value`` at ``path`` in a nested document, creating dicts and lists on the way."""
    node: Any = document
    for part, following in itertools.pairwise(path):
        empty: Any = [] if isinstance(following, int) else {}
        if isinstance(part, int):
            while len(node) <= part:
                node.append({} if not isinstance(following, int) else [])
            node = node[part]
        else:
            node = node.setdefault(part, empty)
    last = path[-1]
    if isinstance(last, int):
        while len(node) <= last:
            node.append(None)
    node[last] = value


def run_document(
    values: dict[Path_, Any],
    *,
    source: str,
    output: str | None,
    model: Path,
    extras: RunExtras | None = None,
) -> dict[str, Any]:
    """The config document ``vstream run --source`` stands for."""
    extras = extras or RunExtras()
    document: dict[str, Any] = {}
    set_path(document, (*PIPELINE, "name"), "run")
    set_path(document, (*PIPELINE, "model", "path"), str(model))
    set_path(document, (*SOURCE, "id"), stream_id_for(source))
    set_path(document, (*SOURCE, "uri"), source)
    # --output replaces its file, as a command's output should.
    sinks: list[dict[str, Any]] = [
        {"type": "stdout"}
        if output is None
        else {"type": "jsonl", "path": str(output), "append": False}
    ]
    if extras.save_video is not None:
        sinks.append({"type": "video", "path": str(extras.save_video)})
    if extras.clips is not None:
        sinks.append({"type": "clips", "directory": str(extras.clips)})
    set_path(document, (*PIPELINE, "sinks"), sinks)
    analytics = (*PIPELINE, "analytics")
    if extras.track or extras.appearance is not None:
        set_path(document, (*analytics, "tracking"), {})
    if extras.lines:
        set_path(document, (*analytics, "lines"), [line.model_dump() for line in extras.lines])
    if extras.zones:
        set_path(document, (*analytics, "zones"), [zone.model_dump() for zone in extras.zones])
    if extras.on_classes is not None and not extras.secondary:
        raise ConfigError([ConfigIssue("--on-classes", None, "applies to --secondary models")])
    on = {} if extras.on_classes is None else {"on": {"classes": extras.on_classes}}
    secondary = [{"name": Path(path).stem, "path": path, **on} for path in extras.secondary]
    if extras.appearance is not None:
        look = Path(extras.appearance).stem
        secondary.append({"name": look, "path": extras.appearance, "kind": "embedding"})
        set_path(document, (*analytics, "tracking", "appearance"), look)
    if secondary:
        set_path(document, (*PIPELINE, "secondary"), secondary)
    for path, value in values.items():
        set_path(document, path, value)
    return document


@dataclass(frozen=True)
class RunExtras:
    """Flags of ``vstream run`` that are not one config field each."""

    track: bool = False
    lines: tuple[Any, ...] = ()
    zones: tuple[Any, ...] = ()
    """``--zone NAME=X1,Y1,...`` (repeatable): :class:`~vstream.config.analytics.ZoneConfig`."""
    save_video: str | None = None
    clips: str | None = None
    secondary: tuple[str, ...] = ()
    """``--secondary PATH`` (repeatable): each a secondary model named after its file."""
    on_classes: list[int] | None = None
    """``--on-classes``: the detector classes every ``--secondary`` model reads."""
    appearance: str | None = None
    """``--appearance PATH``: an embedding model, named after its file, whose vectors the
    tracker uses (``tracking.appearance``); implies ``--track``."""


def secondary_help() -> str:
    """``--secondary``'s help, from the config's fields (one definition of each option)."""
    from vstream.config.secondary import SecondaryConfig

    fields = SecondaryConfig.model_fields
    return (
        "secondary model ONNX file (repeatable), named after its file: each selected "
        f"detection gets attributes.<stem> (kind {fields['kind'].default}; other settings "
        "are a pipelines file's secondary:)"
    )


def appearance_help() -> str:
    """``--appearance``' help, from the tracking fields it sets."""
    from vstream.config.tracking import TrackingConfig

    weight = TrackingConfig.model_fields["appearance_weight"].default
    return (
        "embedding model ONNX file whose vectors join the tracker's association cost at "
        f"weight {weight:g} (objects that cross or hide one another keep their ids); "
        "implies --track"
    )


def on_classes_help() -> str:
    """``--on-classes``' help: the ``on.classes`` field's description."""
    from vstream.config.secondary import SecondaryOn

    return f"with --secondary: {SecondaryOn.model_fields['classes'].description}"


def line_spec(text: str) -> Any:
    """``--line NAME=X1,Y1,X2,Y2``."""
    from vstream.config.analytics import parse_line_spec

    try:
        return parse_line_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def zone_spec(text: str) -> Any:
    """``--zone NAME=X1,Y1,X2,Y2,X3,Y3,...``."""
    from vstream.config.analytics import parse_zone_spec

    try:
        return parse_zone_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def flag_issues(error: ConfigError, flags: dict[str, Option], fallback: str) -> ConfigError:
    """``error`` with each issue's key path replaced by the flag that sets it."""
    by_path = {format_path(o.path): flag for flag, o in flags.items()}
    issues = []
    for issue in error.issues:
        path = issue.path
        flag = by_path.get(path) or next(
            (f for p, f in by_path.items() if path.startswith(p + ".") or path.startswith(p + "[")),
            None,
        )
        where = flag or (fallback if path.endswith(".uri") else "")
        issues.append(ConfigIssue(where, None, issue.message))
    return ConfigError(issues)


def build_run_config(
    args: argparse.Namespace,
    flags: dict[str, Option],
    *,
    source: str,
    output: str | None,
    model: Path,
    extras: RunExtras | None = None,
) -> VstreamConfig:
    """Validate the document of ``vstream run --source``; errors name the flags."""
    values = given(args)
    document = run_document(values, source=source, output=output, model=model, extras=extras)
    try:
        return parse_data(document, base_dir=Path.cwd())
    except ConfigError as exc:
        extras = extras or RunExtras()
        sink_flags = ["--output"]
        sink_flags += ["--save-video"] if extras.save_video is not None else []
        sink_flags += ["--clips"] if extras.clips is not None else []
        named = {
            "--source": (*SOURCE, "uri"),
            "--line": (*PIPELINE, "analytics", "lines"),
            "--zone": (*PIPELINE, "analytics", "zones"),
            # The --appearance model follows the --secondary ones; the more exact path first.
            "--appearance": (*PIPELINE, "secondary", len(extras.secondary)),
            "--secondary": (*PIPELINE, "secondary"),
            **{flag: (*PIPELINE, "sinks", i) for i, flag in enumerate(sink_flags)},
        }
        flags = {**flags, **{f: Option(p, FieldInfo(), Cli(f)) for f, p in named.items()}}
        raise flag_issues(exc, flags, "--source") from None
