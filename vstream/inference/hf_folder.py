"""What a Hugging Face model folder says beside its ``model.onnx``.

The models users download from the Hub (transformers' DETR, RT-DETR, D-FINE,
exported by Optimum) come as a folder: ``model.onnx``, ``config.json`` (the
class names, ``id2label``) and ``preprocessor_config.json`` (how the image
processor made the pictures the model was trained on). The ONNX file itself
carries neither, so a family's defaults would have to guess, and they guess
wrong for some (RT-DETR's processor only rescales to 0..1 where RF-DETR
normalises with ImageNet's mean and std). These files are read when they are
there; what they say that vstream cannot do is kept as notes for
``vstream info`` and the log.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vstream.config.model import ResizeMode, model_channels
from vstream.errors import ModelError

PREPROCESSOR_FILE = "preprocessor_config.json"
CONFIG_FILE = "config.json"
MAX_FILE_BYTES = 4 * 2**20
"""Largest file read: a processor config is a few hundred bytes, a config with names for
100,000 classes about 3 MB."""

PIL_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
"""PIL's resampling filters by the number the processor config stores."""


@dataclass(frozen=True)
class ImageProcessor:
    """The parts of a ``preprocessor_config.json`` vstream follows; None where it says nothing
    vstream can follow (then the model's metadata or the family's default applies)."""

    path: Path
    resize_mode: ResizeMode | None = None
    size: tuple[int, int] | None = None
    """``(height, width)`` the processor resizes every picture to."""
    input_range: Literal[1, 255] | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    notes: tuple[str, ...] = ()
    """What the file asks that vstream does otherwise, in words."""

    @property
    def source(self) -> str:
        return self.path.name


def _read_json(path: Path) -> Any:
    """The JSON document at ``path``; a ModelError (one line) if it cannot be read."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ModelError(f"{path}: {size:,} bytes, more than the {MAX_FILE_BYTES:,} read")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from None


def _channels(
    path: Path, config: Mapping[str, Any], key: Literal["mean", "std"]
) -> tuple[float, float, float] | None:
    """``image_mean`` or ``image_std`` (one number for all three channels, as transformers
    takes it, or three), held to the config's rule for ``mean`` or ``std``; None where unset."""
    value = config.get(f"image_{key}")
    if value is None:
        return None
    three = [value] * 3 if isinstance(value, int | float) and not isinstance(value, bool) else value
    shown = f"{path}: image_{key} {str(value)[:80]}"
    return model_channels(shown, key, three)


def _size(config: Mapping[str, Any]) -> tuple[ResizeMode | None, tuple[int, int] | None, str]:
    """Where pictures go and at what size, from ``do_resize`` and ``size``; with a note where
    vstream cannot do what the processor does."""
    size = config.get("size")
    if config.get("do_resize") is False:
        return None, None, "do_resize is false (pictures fed at their own size): not followed"
    if not isinstance(size, dict):
        return None, None, "" if size is None else f"size {size!r} is not understood"
    height, width = size.get("height"), size.get("width")
    if isinstance(height, int) and isinstance(width, int) and height > 0 and width > 0:
        return "stretch", (height, width), ""
    if "shortest_edge" in size:
        return (
            "letterbox",
            None,
            (
                f"size {size} resizes each picture in proportion to its own size; vstream feeds "
                "one size, letterboxed (centred, where the processor pads right and bottom)"
            ),
        )
    return None, None, f"size {size} is not understood"


def _range(config: Mapping[str, Any]) -> tuple[Literal[1, 255] | None, str]:
    if config.get("do_rescale") is False:
        return 255, ""
    factor = config.get("rescale_factor")
    if factor is None or (
        isinstance(factor, int | float) and math.isclose(factor, 1 / 255, rel_tol=1e-6)
    ):
        return (1 if "do_rescale" in config or factor is not None else None), ""
    return None, f"rescale_factor {factor!r} is not 1/255: vstream feeds 0..1 or 0..255"


def read_image_processor(model: Path) -> ImageProcessor | None:
    """The ``preprocessor_config.json`` beside ``model``, if there is one.

    ``value = (pixel * rescale_factor - mean) / std`` there is vstream's
    ``(pixel * input_range - mean) / std`` with input_range 1 for a rescale
    of 1/255 (255 without a rescale), mean and std as written.
    """
    path = model.parent / PREPROCESSOR_FILE
    if not path.is_file():
        return None
    config = _read_json(path)
    if not isinstance(config, dict):
        raise ModelError(f"{path}: expected a JSON object, got {type(config).__name__}")
    notes = []
    resize_mode, size, note = _size(config)
    notes.append(note)
    input_range, note = _range(config)
    notes.append(note)
    mean = std = None
    if config.get("do_normalize") is False:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    elif config.get("do_normalize") is True:
        mean, std = _channels(path, config, "mean"), _channels(path, config, "std")
    resample = config.get("resample")
    if resize_mode is not None and resample not in (None, 2):
        name = PIL_RESAMPLE.get(resample, repr(resample))
        notes.append(f"resample {name}: vstream resizes bilinear (model.resize: linear)")
    return ImageProcessor(
        path, resize_mode, size, input_range, mean, std, tuple(n for n in notes if n)
    )


def read_id2label(model: Path) -> dict[int, str]:
    """Class names from ``id2label`` in the ``config.json`` beside ``model`` ({} if none).

    A ``config.json`` that is not a transformers config (no ``id2label``, or not
    JSON at all) is another program's file and says nothing here.
    """
    path = model.parent / CONFIG_FILE
    try:
        config = _read_json(path) if path.is_file() else None
    except ModelError:
        return {}
    labels = config.get("id2label") if isinstance(config, dict) else None
    if not isinstance(labels, dict):
        return {}
    try:
        return {int(k): str(v) for k, v in labels.items()}
    except (TypeError, ValueError):
        return {}
