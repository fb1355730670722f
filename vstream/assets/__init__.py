"""The bundled demo: a small detector and a sample video with its ground truth.

Built by ``tools/demo_assets`` (procedural shapes, trained on the CPU), so a
fresh install can run end to end without downloading anything.

Configs, flags and Python name these files as ``vstream://NAME``
(``vstream://demo.onnx``, ``vstream://sample.mp4``): an address that means
the same file from any folder and after ``pip install``, where a relative
path (``../vstream/assets/demo.onnx``) breaks as soon as a config is copied.
"""

from pathlib import Path, PurePosixPath

ASSETS_DIR = Path(__file__).resolve().parent
DEMO_MODEL = ASSETS_DIR / "demo.onnx"
COLOUR_MODEL = ASSETS_DIR / "colour.onnx"
"""The demo colour classifier, a secondary model for the demo detector's objects."""
APPEARANCE_MODEL = ASSETS_DIR / "appearance.onnx"
"""The demo appearance embedder (kind ``embedding``): unit vectors for ``tracking.appearance``."""
DEMO_SEG_MODEL = ASSETS_DIR / "demo_seg.onnx"
"""The demo detector with a mask head (``task: segment``, Ultralytics' layout, scores spread
as a real model's): ``tools/seg/demo_model.py``."""
SAMPLE_VIDEO = ASSETS_DIR / "sample.mp4"
SAMPLE_GROUND_TRUTH = ASSETS_DIR / "sample_ground_truth.json"

SCHEME = "vstream://"
"""How a bundled file is named wherever a path is taken: ``vstream://demo.onnx``."""

BUNDLED = ("demo.onnx", "colour.onnx", "appearance.onnx", "sample.mp4", "sample_ground_truth.json")
"""The names ``vstream://`` takes (the parity videos under ``parity/`` too, by their path)."""


def is_bundled(value: str) -> bool:
    """Whether ``value`` names a bundled file (``vstream://NAME``) rather than a path."""
    return value[: len(SCHEME)].lower() == SCHEME


def bundled(value: str) -> Path:
    """The file ``vstream://NAME`` names; ValueError naming the choices when there is none.

    Only files of this folder: a name with ``..`` or an absolute path is refused, so
    the address cannot reach outside the package.
    """
    name = value[len(SCHEME) :]
    parts = PurePosixPath(name).parts
    path = ASSETS_DIR.joinpath(*parts) if parts else ASSETS_DIR
    if ".." in parts or name.startswith("/") or path.suffix == ".py" or not path.is_file():
        names = ", ".join(SCHEME + n for n in BUNDLED)
        raise ValueError(f"no bundled file {value!r}; there are {names}")
    return path


__all__ = [
    "APPEARANCE_MODEL",
    "ASSETS_DIR",
    "BUNDLED",
    "COLOUR_MODEL",
    "DEMO_MODEL",
    "DEMO_SEG_MODEL",
    "SAMPLE_GROUND_TRUTH",
    "SAMPLE_VIDEO",
    "SCHEME",
    "bundled",
    "is_bundled",
]
