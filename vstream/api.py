"""The shortest way in from Python: ``vstream.detect(source, model=..., **options)``.

It builds what ``vstream run`` builds: a one-pipeline config, checked by the
same pydantic models (:class:`~vstream.config.PipelineConfig`) with the same
messages, and runs it on the engine's readers and stages, so its options,
defaults, bounds and error semantics are the CLI's and the pipelines file's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from vstream.config.analytics import AnalyticsConfig, parse_line_spec, parse_zone_spec
from vstream.config.base import NAME_PATTERN
from vstream.config.loading import ConfigError, ConfigIssue, issues_from
from vstream.config.model import ModelConfig, PostprocessOptions, RuntimeOptions
from vstream.config.pipelines import CALLER_TAKES_RECORDS, PipelineConfig
from vstream.config.secondary import SecondaryConfig
from vstream.config.sources import SourceOptions
from vstream.frame import Channels, Frame, as_frame
from vstream.results import FrameResult
from vstream.uri import stream_id_for

SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("model", ModelConfig),
    ("postprocess", PostprocessOptions),
    ("runtime", RuntimeOptions),
    ("source", SourceOptions),
    ("analytics", AnalyticsConfig),
)
"""Where each keyword option of :func:`detect` goes in the pipeline, by the field's name."""

OWN = ("model", "stream_id", "secondary", "sinks", "track", "channels", "fps")
""":func:`detect`'s own keywords, which are no single field of a section."""

PICTURE_FPS = 30.0
"""The rate pictures with no time of their own are taken at when ``fps`` is not given."""

log = logging.getLogger("vstream")


def accepted_options() -> list[str]:
    """Every keyword :func:`detect` takes, sorted: its own and every section's fields."""
    fields = {name for _, model in SECTIONS for name in model.model_fields} - {"path"}
    return sorted(fields | set(OWN))


def detect(
    source: str | Path | Iterable[Frame | Any],
    *,
    model: str | Path | None = None,
    stream_id: str | None = None,
    secondary: Iterable[SecondaryConfig | dict[str, Any] | str | Path] = (),
    sinks: Iterable[dict[str, Any] | BaseModel] = (),
    track: bool = False,
    channels: Channels | None = None,
    fps: float | None = None,
    **options: Any,
) -> Iterator[FrameResult]:
    """Detect objects in every frame of ``source``; one :class:`FrameResult` per frame, in order.

    ``source`` is a file path, a stream URL, ``/dev/videoN``, ``vstream://sample.mp4``,
    or any iterable of :class:`Frame` or pictures (numpy ``(H, W, 3)`` uint8, BGR
    unless ``channels="rgb"``; torch uint8, RGB unless ``channels="bgr"``;
    :func:`vstream.frame.as_frame`). ``model`` defaults to the bundled demo detector.
    Pictures have no time: the ``n``-th is at ``n / fps`` seconds (tracking's, the lines'
    and the zones' timings are in seconds; without ``fps`` they are taken at
    :data:`PICTURE_FPS`, said once); a :class:`Frame` keeps its own.

    ``options`` are the fields of a pipelines file's ``model``, ``postprocess``,
    ``runtime``, source and ``analytics`` sections, by name (``conf=0.3``,
    ``device="cpu"``, ``detect_every=3``, ``tracking={"track_buffer_seconds": 2}``,
    ``lines=[...]``, ``zones=[...]``); a line or zone is a config object, its keys
    as a dict, or the CLI's ``"gate=320,360,320,0"``. ``track=True`` is ``--track``
    (tracking with its defaults). ``secondary`` are the cascade's models (a
    :class:`~vstream.config.SecondaryConfig`, its keys, or an ONNX path: a
    classifier named after the file). ``sinks`` also send the records elsewhere
    (``[{"type": "jsonl", "path": "out.jsonl"}]``, as in the file). Everything is
    checked before anything runs, by the pipelines file's models: a bad value is a
    :class:`~vstream.config.ConfigError` whose message names the key as the file
    would; an unknown keyword a TypeError listing every keyword taken.
    """
    from vstream.engine.pipeline import Pipeline, iterate

    streams: list[Any] = []
    if isinstance(source, str | Path):
        uri = str(source)
        sources = [{"id": stream_id or stream_id_for(uri), "uri": uri}]
    else:
        given = sorted(name for name in options if name in SourceOptions.model_fields)
        if given:
            raise TypeError(f"source options {given} need a path or URL source")
        if stream_id is not None and not re.fullmatch(NAME_PATTERN, stream_id):
            message = f"{stream_id!r} does not match {NAME_PATTERN}"
            raise ConfigError([ConfigIssue("stream_id", None, message)])
        sources = []
    if fps is not None and not (isinstance(fps, int | float) and 0 < fps <= 1000):
        raise ConfigError([ConfigIssue("fps", None, f"must be in (0, 1000], got {fps!r}")])
    config = pipeline_config(sources, model, secondary, sinks, track, options)
    if not isinstance(source, str | Path):
        analytics = config.analytics
        timed = analytics.tracking is not None or bool(analytics.lines or analytics.zones)
        streams.append(as_frames(source, channels, stream_id, fps, timed=timed))
    pipeline = Pipeline.from_config(config, collect=True)
    return iterate(pipeline, pipeline.sinks[0], [*config.sources, *streams])  # type: ignore[arg-type]


def as_frames(
    pictures: Iterable[Frame | Any],
    channels: Channels | None = None,
    stream_id: str | None = None,
    fps: float | None = None,
    *,
    timed: bool = False,
) -> Iterator[Frame]:
    """Each picture as a :class:`Frame` (:func:`vstream.frame.as_frame`), numbered in order
    and timed ``index / fps``; all of stream ``stream_id`` where one is given, else pictures
    of stream "0" and frames of their own, whose stream ids are checked as a config's are
    (ValueError): they name the stream's files (``{stream}`` in a sink's path) and topics.

    ``timed``: the pipeline's timings are in seconds (tracking, lines, zones): pictures
    all at 0 s stopped its clock (no track ever forgotten, no crossing counted), so
    without ``fps`` they are taken at :data:`PICTURE_FPS`, and it is said once.
    """
    said = False
    for index, picture in enumerate(pictures):
        if timed and fps is None and not said and not isinstance(picture, Frame):
            log.warning(
                "the pictures have no time: taken at %g fps (give detect() their fps= for "
                "tracking's and the lines' timings in seconds)",
                PICTURE_FPS,
            )
            said = True
        pts_seconds = index / (fps or PICTURE_FPS)
        frame = as_frame(
            picture, channels, stream_id=stream_id or "0", index=index, pts_seconds=pts_seconds
        )
        if stream_id is None and not re.fullmatch(NAME_PATTERN, frame.stream_id):
            raise ValueError(
                f"picture {index}: stream id {frame.stream_id!r} does not match {NAME_PATTERN}"
            )
        yield (
            frame
            if stream_id is None or frame.stream_id == stream_id
            else frame.in_stream(stream_id)
        )


def pipeline_config(
    sources: list[dict[str, Any]],
    model: str | Path | None,
    secondary: Iterable[SecondaryConfig | dict[str, Any] | str | Path],
    sinks: Iterable[dict[str, Any] | BaseModel],
    track: bool,
    options: dict[str, Any],
) -> PipelineConfig:
    """The pipeline :func:`detect` runs, validated as a pipelines file's would be."""
    from vstream import assets

    document: dict[str, Any] = {
        "name": "detect",
        "model": {"path": str(model or assets.DEMO_MODEL)},
        "secondary": [_secondary(item) for item in secondary],
        "sources": sources,
        "sinks": list(sinks),
        "analytics": {"tracking": {}} if track else {},
    }
    for name, value in options.items():
        section = next((s for s, m in SECTIONS if name in m.model_fields), None)
        if section is None or name == "path":
            raise TypeError(
                f"unknown option {name!r}; options are: {', '.join(accepted_options())}"
            )
        if section == "source":
            for item in sources:
                item[name] = value
            continue
        document.setdefault(section, {})[name] = _spec(name, value)
    try:
        return PipelineConfig.model_validate(
            document, context={"base_dir": Path.cwd(), CALLER_TAKES_RECORDS: True}
        )
    except ValidationError as exc:
        issues = issues_from(exc, document, {}, PipelineConfig)
        raise ConfigError([ConfigIssue(i.path.replace("sources[0].", ""), None, i.message)
                           for i in issues]) from None  # fmt: skip


def _spec(name: str, value: Any) -> Any:
    """``lines``/``zones`` items given as the CLI writes them (``"gate=0,10,640,10"``) read
    as the CLI reads them; ``tracking=True`` as ``track=True``; anything else as given."""
    parse = {"lines": parse_line_spec, "zones": parse_zone_spec}.get(name)
    if parse is not None and isinstance(value, Iterable) and not isinstance(value, str):
        try:
            return [parse(item) if isinstance(item, str) else item for item in value]
        except ValueError as exc:
            raise ConfigError([ConfigIssue(f"analytics.{name}", None, str(exc))]) from None
    if name == "tracking" and value is True:
        return {}
    return value


def _secondary(item: SecondaryConfig | dict[str, Any] | str | Path) -> Any:
    """One ``secondary`` item as the file has it; a bare path is a classifier named after
    its file."""
    if isinstance(item, str | Path):
        return {"name": Path(item).stem, "path": str(item)}
    return item
