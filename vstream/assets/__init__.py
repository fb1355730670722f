"""The bundled demo: a small detector and a sample video with its ground truth.

Built by ``tools/demo_assets`` (procedural shapes, trained on the CPU), so a
fresh install can run end to end without downloading anything.
"""

from pathlib import Path

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

__all__ = [
    "APPEARANCE_MODEL",
    "ASSETS_DIR",
    "COLOUR_MODEL",
    "DEMO_MODEL",
    "DEMO_SEG_MODEL",
    "SAMPLE_GROUND_TRUTH",
    "SAMPLE_VIDEO",
]
