"""Train the parity detector with Ultralytics' own trainer on procedural scenes, offline, on CPU.

The parity checks compare vstream's detections with Ultralytics' ``predict`` on
the same ONNX model, so the model must be one Ultralytics builds, trains and
exports itself, and its scores must spread the way a real model's do (the
demo model is sure of nearly everything, which hides threshold and rounding
differences). A YOLOv8n-family network with a quarter of YOLOv8n's width
(``--width``) is trained from scratch for a few epochs on images drawn by
``tools/demo_assets/scenes.py``: short training keeps its scores modest.

Images are written in YOLO txt format to a work directory (a temporary one
unless ``--work-dir`` is given), in the frame shapes of the parity videos and
a few others, saved as JPEG so they carry chroma subsampling and compression
noise as decoded video does. Nothing is downloaded: Ultralytics runs offline
with its settings in the work directory. Needs ``pip install -e '.[bench]'``::

    .venv/bin/python tools/parity/train.py [--epochs 10] [--output PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "demo_assets"))

import scenes  # noqa: E402

DEFAULT_OUTPUT = ROOT / "benchmarks" / "generated" / "yolov8n_shapes.onnx"
"""For the benchmarks, never committed: Ultralytics licenses the models it makes under the AGPL."""
IMGSZ = 320
FRAME_SHAPES: tuple[tuple[int, int], ...] = ((854, 480), (480, 848), (640, 480), (640, 360))
"""(width, height) of the parity videos and the demo video; half the images have one of these."""
RADIUS_RANGE = (12.0, 48.0)
"""Circumradius of the shapes in source pixels: the videos' objects are 16 to 40."""
MAX_OBJECTS = 9
VIEWS_PER_BACKGROUND = 2
"""Rendering textures dominates data generation, so each is used twice, disguised."""


def _frame_shape(rng: np.random.Generator) -> tuple[int, int]:
    """A parity video's shape half of the time, else a random one (long side 320 to 900)."""
    if rng.random() < 0.5:
        return FRAME_SHAPES[int(rng.integers(len(FRAME_SHAPES)))]
    long_side = int(rng.integers(320, 901))
    short_side = int(long_side * rng.uniform(0.45, 1.0))
    return (long_side, short_side) if rng.random() < 0.6 else (short_side, long_side)


def write_split(root: Path, split: str, count: int, rng: np.random.Generator) -> None:
    """``count`` images and their YOLO labels (``cls cx cy w h``, normalised) under ``root``."""
    images, labels = root / "images" / split, root / "labels" / split
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    background = None
    for index in range(count):
        if index % VIEWS_PER_BACKGROUND == 0:
            width, height = _frame_shape(rng)
            background = scenes.random_background(rng, height, width)
        else:
            background = scenes.background_variant(rng, background)
        image, boxes = scenes.random_scene(rng, background, RADIUS_RANGE, MAX_OBJECTS)
        height, width = image.shape[:2]
        quality = int(rng.integers(70, 96))
        Image.fromarray(image).save(images / f"{index:05d}.jpg", quality=quality)
        rows = [
            f"{int(c)} {(x1 + x2) / 2 / width:.6f} {(y1 + y2) / 2 / height:.6f} "
            f"{(x2 - x1) / width:.6f} {(y2 - y1) / height:.6f}"
            for x1, y1, x2, y2, c in boxes.tolist()
        ]
        (labels / f"{index:05d}.txt").write_text("".join(row + "\n" for row in rows))


def write_dataset(root: Path, train: int, val: int, seed: int) -> Path:
    """Render the training and validation images; return the dataset YAML's path."""
    rng = np.random.default_rng(seed)
    write_split(root, "train", train, rng)
    write_split(root, "val", val, rng)
    data = root / "shapes.yaml"
    names = dict(enumerate(scenes.NAMES))
    data.write_text(
        yaml.safe_dump(
            {"path": str(root), "train": "images/train", "val": "images/val", "names": names}
        )
    )
    return data


def write_model_yaml(root: Path, width: float) -> Path:
    """Ultralytics' own YOLOv8 description with 4 classes and its ``n`` scale at ``width``.

    Depth and channel cap stay YOLOv8n's; only the width multiplier shrinks, so the
    layers, strides and head are YOLOv8n's and the file stays a few MB.
    """
    from ultralytics.nn.tasks import yaml_model_load

    description = yaml_model_load("yolov8n.yaml")
    depth, _, max_channels = description["scales"]["n"]
    description["scales"] = {"n": [depth, width, max_channels]}
    description["nc"] = len(scenes.NAMES)
    for key in ("scale", "yaml_file"):
        description.pop(key, None)
    path = root / "yolov8n-shapes.yaml"  # the name tells Ultralytics the scale: n
    path.write_text(yaml.safe_dump(description, sort_keys=False))
    return path


def train(work: Path, data: Path, model_yaml: Path, args: argparse.Namespace) -> Path:
    """Run Ultralytics' trainer; return the last epoch's weights (the EMA, as Ultralytics saves)."""
    from ultralytics import YOLO

    model = YOLO(str(model_yaml), task="detect")
    model.train(
        data=str(data),
        epochs=args.epochs,
        imgsz=IMGSZ,
        batch=args.batch,
        nbs=args.batch,  # one optimiser step per batch: few images, so no accumulation
        device="cpu",
        workers=args.workers,
        seed=args.seed,
        deterministic=True,
        pretrained=False,
        close_mosaic=max(1, args.epochs // 4),
        plots=False,
        save_period=1,
        project=str(work / "runs"),
        name="train",
        exist_ok=True,
        verbose=False,
    )
    return work / "runs" / "train" / "weights" / "last.pt"


def export(weights: Path, output: Path) -> Path:
    """Export ``weights`` as Ultralytics does (dynamic batch and size, opset 17) to ``output``.

    ``simplify=False``: onnxslim is not installed, and Ultralytics would pip-install it.
    """
    from ultralytics import YOLO

    exported = YOLO(str(weights), task="detect").export(
        format="onnx", imgsz=IMGSZ, dynamic=True, opset=17, simplify=False
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(exported, output)
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--work-dir", type=Path, help="keep images and runs here (default: temp)")
    parser.add_argument("--train-images", type=int, default=1600)
    parser.add_argument("--val-images", type=int, default=160)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--width", type=float, default=0.125, help="YOLOv8n's is 0.25")
    parser.add_argument("--workers", type=int, default=1, help="data-loading processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--export-only", type=Path, metavar="WEIGHTS", help="skip training")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parity-train-") as tmp:
        work = (args.work_dir or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        os.environ.update(YOLO_OFFLINE="1", YOLO_CONFIG_DIR=str(work / "config"))
        from ultralytics import settings

        settings.update({"sync": False})
        weights = args.export_only
        if weights is None:
            started = time.perf_counter()
            data = write_dataset(work / "data", args.train_images, args.val_images, args.seed)
            print(f"dataset: {time.perf_counter() - started:.0f} s", flush=True)
            started = time.perf_counter()
            weights = train(work, data, write_model_yaml(work, args.width), args)
            print(f"training: {(time.perf_counter() - started) / 60:.1f} min", flush=True)
        path = export(weights.resolve(), args.output.resolve())
    print(f"{path} ({path.stat().st_size / 2**20:.2f} MB)")


if __name__ == "__main__":
    main()
