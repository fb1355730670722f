"""The shortest way in from Python: ``vstream.detect(source, model=..., **options)``.

It builds the same objects as ``vstream run --source``: a
:class:`~vstream.detector.Detector` from the ``model``/``postprocess``/
``runtime`` options, a :class:`~vstream.config.SourceConfig` from the source
options, and runs them on the engine's readers and stages, so its defaults,
bounds and error semantics are the CLI's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from vstream.config.secondary import SecondaryConfig
from vstream.config.sources import SourceConfig, SourceOptions
from vstream.frame import Frame
from vstream.results import FrameResult
from vstream.uri import stream_id_for


def detect(
    source: str | Path | Iterable[Frame],
    *,
    model: str | Path | None = None,
    stream_id: str | None = None,
    secondary: Iterable[SecondaryConfig | dict[str, Any] | str | Path] = (),
    **options: Any,
) -> Iterator[FrameResult]:
    """Detect objects in every frame of ``source``; one :class:`FrameResult` per frame, in order.

    ``source`` is a file path, a stream URL, ``/dev/videoN``, or any iterable
    of :class:`Frame`. ``options`` are the options of a pipelines file's
    ``model``, ``postprocess``, ``runtime`` and source sections, by name
    (``conf=0.3``, ``device="cpu"``, ``decoder_threads=2``, ``loop=True``).
    ``model`` defaults to the bundled demo detector.

    ``secondary`` are the cascade's models (a pipelines file's ``secondary:``):
    each a :class:`~vstream.config.SecondaryConfig`, its keys as a dict, or an
    ONNX path (a classifier named after the file); each detection they read gets
    ``result.detections.data["attributes"]`` and ``"attributes"`` in its record.
    """
    from vstream import assets
    from vstream.detector import Detector
    from vstream.engine.pipeline import detect_iter

    source_options = {k: options.pop(k) for k in list(options) if k in SourceOptions.model_fields}
    models = [_secondary(item) for item in secondary]
    detector = Detector(model or assets.DEMO_MODEL, **options)
    if isinstance(source, str | Path):
        uri = str(source)
        config = SourceConfig(id=stream_id or stream_id_for(uri), uri=uri, **source_options)
        return detect_iter(detector, [config], secondary=models)
    if source_options:
        raise TypeError(f"source options {sorted(source_options)} need a path or URL source")
    return detect_iter(detector, [source], secondary=models)


def _secondary(item: SecondaryConfig | dict[str, Any] | str | Path) -> SecondaryConfig:
    """One ``secondary`` item as a config; a bare path is a classifier named after its file."""
    if isinstance(item, SecondaryConfig):
        return item
    if isinstance(item, str | Path):
        return SecondaryConfig(name=Path(item).stem, path=str(item))
    return SecondaryConfig.model_validate(item)
