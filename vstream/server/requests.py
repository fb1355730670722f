"""Request bodies turned into the engines' own types, before any engine sees them.

An engine takes a pipeline name and a validated
:class:`~vstream.config.sources.SourceConfig`; everything about JSON (its
shape, the ``pipeline`` key, paths relative to the config) is settled here,
and anything wrong is one :class:`~vstream.errors.VstreamError` or
:class:`~vstream.config.loading.ConfigError` (HTTP 400; an unknown pipeline 404).
"""

from __future__ import annotations

import json
from pathlib import Path

from vstream.config.loading import parse_source
from vstream.config.pipelines import VstreamConfig
from vstream.config.sources import SourceConfig
from vstream.engine.errors import PipelineNotFound
from vstream.errors import VstreamError


def stream_request(body: object, config: VstreamConfig, base_dir: Path) -> tuple[str, SourceConfig]:
    """The pipeline name and the validated source of a ``POST /streams`` body.

    The body is a source as in the config, plus ``pipeline`` when there are
    several; file sources must lie under ``server.allowed_paths``.
    """
    if not isinstance(body, dict):
        raise VstreamError("the body must be a JSON object describing a source")
    fields = dict(body)
    names = [p.name for p in config.pipelines]
    name = fields.pop("pipeline", None)
    if name is None:
        if len(names) != 1:
            raise VstreamError("say which pipeline: 'pipeline' is one of " + ", ".join(names))
        name = names[0]
    if not isinstance(name, str):  # a bad request (400), not a pipeline not found (404)
        raise VstreamError(f"'pipeline' must be a pipeline's name, got {json.dumps(name)[:40]}")
    if name not in names:
        raise PipelineNotFound(f"no pipeline {name!r}; choose from " + ", ".join(names))
    source = parse_source(fields, base_dir=base_dir, allowed_paths=config.server.allowed_paths)
    return name, source
