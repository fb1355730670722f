"""The demo colour classifier: names each object's colour, read from its crop.

The scenes paint every shape in one flat RGB colour (:class:`scenes.Shape`), so
the colour is ground truth the renderer already has. Its name comes from a
fixed rule on HSV (:func:`colour_label`): dark colours are ``black``, washed-out
ones ``white`` or ``grey``, the rest one of seven hue ranges. The network is
trained on crops of shapes rendered on the detector's training backgrounds,
cut with the pipeline's own crop (:func:`vstream.cascade.crops.crop_rgb`,
``resize: linear``: one sample per input pixel, ten times cheaper than ``area`` in
torchvision's CPU roi_align, and a flat colour does not alias) from boxes
jittered like a detector's, some round-tripped through 4:2:0 video colour, so it
reads what ``vstream run`` will give it.

Usage (from the repository root)::

    .venv/bin/python tools/demo_assets/colour.py train     # writes vstream/assets/colour.onnx
    .venv/bin/python tools/demo_assets/colour.py evaluate  # accuracy on sample.mp4

Evaluation decodes ``sample.mp4`` through vstream (:class:`vstream.VideoFileSource`),
reads every ground-truth box with :class:`vstream.cascade.SecondaryModel` and
compares with the label of the colour the renderer painted that object in
(the sample is rendered again to learn the colours: ``video.render_sample``).
"""

from __future__ import annotations

import colorsys
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import scenes
import torch
from crop_export import parse, save, tool_parser
from torch import nn
from train import yuv420_roundtrip

from vstream.cascade.crops import crop_rgb

REPO_ROOT = Path(__file__).resolve().parents[2]
ASSET = REPO_ROOT / "vstream" / "assets" / "colour.onnx"

LABELS = ("red", "orange", "yellow", "green", "cyan", "blue", "purple", "white", "grey", "black")
HUES = ((15, "orange"), (45, "yellow"), (70, "green"), (165, "cyan"), (200, "blue"),
        (260, "purple"), (330, "red"))  # fmt: skip
"""Upper hue bound (degrees) of each named range, from 15 (red below it)."""
IMGSZ = 32

METADATA = {
    "kind": "classifier",
    "labels": json.dumps(list(LABELS)),
    "outputs": "logits",
    "description": "vstream demo colour classifier (procedural shapes)",
}
"""What the model says of itself, beside the crop settings :mod:`crop_export` writes."""


def colour_label(rgb: tuple[float, float, float]) -> int:
    """The index in :data:`LABELS` of an RGB colour (0..255), by a fixed HSV rule."""
    hue, saturation, value = colorsys.rgb_to_hsv(*(c / 255 for c in rgb))
    if value < 0.35:
        return LABELS.index("black")
    if saturation < 0.25:
        return LABELS.index("white" if value >= 0.75 else "grey")
    degrees = hue * 360
    name = "red"
    for bound, label in HUES:
        if degrees >= bound:
            name = label
    return LABELS.index(name)


def _colour_of(rng: np.random.Generator, label: int, away_from: np.ndarray) -> np.ndarray:
    """A random colour named ``label``, at least 60 (RGB distance) from ``away_from``."""
    best = None
    for _ in range(400):
        colour = rng.uniform(0, 255, 3)
        if colour_label(tuple(colour)) == label:
            best = colour
            if np.linalg.norm(colour - away_from) >= 60:
                return colour
    return best if best is not None else rng.uniform(0, 255, 3)


def make_crops(
    rng: np.random.Generator, scenes_count: int, size: int = 160
) -> tuple[torch.Tensor, torch.Tensor]:
    """Crops ``(N, 3, 32, 32)`` in 0..255 and their labels, balanced across :data:`LABELS`."""
    crops, labels = [], []
    for _ in range(scenes_count):
        image = scenes.random_background(rng, size, size)
        boxes, names = [], []
        for _ in range(int(rng.integers(2, 6))):
            radius = math.exp(rng.uniform(math.log(10), math.log(40)))
            cx, cy = rng.uniform(radius, size - radius, 2)
            label = int(rng.integers(len(LABELS)))
            x0, y0 = int(max(cx - radius, 0)), int(max(cy - radius, 0))
            patch = image[y0 : int(cy + radius) + 1, x0 : int(cx + radius) + 1].reshape(-1, 3)
            colour = _colour_of(rng, label, patch.mean(axis=0))
            shape = scenes.Shape(
                int(rng.integers(len(scenes.NAMES))), cx, cy, radius,
                rng.uniform(0, 2 * math.pi), tuple(int(c) for c in colour),
                rng.uniform(0.22, 0.36),
            )  # fmt: skip
            box = scenes.draw_shape(image, shape)
            if box is None:
                continue
            width, height = box[2] - box[0], box[3] - box[1]
            jitter = rng.normal(0, 0.06, 4) * [width, height, width, height]
            boxes.append(np.asarray(box, np.float32) + jitter.astype(np.float32))
            names.append(colour_label(tuple(int(c) for c in colour)))
        if not boxes:
            continue
        if rng.random() < 0.5:
            image = yuv420_roundtrip(image[None])[0]
        rgb = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
        crops.append(crop_rgb(rgb, torch.from_numpy(np.stack(boxes)), (IMGSZ, IMGSZ)))
        labels += names
    return torch.cat(crops), torch.tensor(labels)


class ColourNet(nn.Module):
    """Three strided conv blocks, global average pooling, one linear layer: about 25k weights.

    Takes 0..1 RGB (the crop over 255, as the ONNX metadata says) and gives logits.
    """

    def __init__(self) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU()
            )

        self.features = nn.Sequential(
            block(3, 16), block(16, 32), block(32, 32), block(32, 64), nn.AdaptiveAvgPool2d(1)
        )
        self.head = nn.Linear(64, len(LABELS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def train(seed: int, scenes_count: int, epochs: int) -> ColourNet:
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    start = time.perf_counter()
    crops, labels = make_crops(rng, scenes_count)
    print(f"{len(crops)} crops in {time.perf_counter() - start:.0f} s; "
          f"per label {np.bincount(labels.numpy(), minlength=len(LABELS)).tolist()}")  # fmt: skip
    inputs = crops / 255
    model = ColourNet()
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    steps = epochs * math.ceil(len(inputs) / 128)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, 3e-3, total_steps=steps)
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(inputs))
        total = 0.0
        for batch in order.split(128):
            x = inputs[batch]
            if torch.rand(()) < 0.5:
                x = x.flip(3)
            loss = nn.functional.cross_entropy(model(x), labels[batch], label_smoothing=0.05)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += float(loss.detach()) * len(batch)
        print(f"epoch {epoch + 1}/{epochs}: loss {total / len(inputs):.3f}")
    return model.eval()


def held_out(path: Path, seed: int, scenes_count: int) -> tuple[float, int]:
    """Accuracy on fresh synthetic crops (a seed training never used), hue boundaries and all."""
    import onnxruntime as ort

    crops, labels = make_crops(np.random.default_rng(seed), scenes_count)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"images": (crops / 255).numpy()})
    return float((logits.argmax(axis=1) == labels.numpy()).mean()), len(labels)


def evaluate(path: Path, seed: int) -> dict[str, float]:
    """Accuracy on every ground-truth box of ``sample.mp4``, per object and overall."""
    import video

    from vstream import VideoFileSource
    from vstream.assets import SAMPLE_GROUND_TRUTH, SAMPLE_VIDEO
    from vstream.cascade import SecondaryModel
    from vstream.config.secondary import SecondaryConfig

    colours = video.render_sample(seed).colors
    truth = {identity: colour_label(c) for identity, c in colours.items()}
    frames = json.loads(SAMPLE_GROUND_TRUTH.read_text())["frames"]
    model = SecondaryModel(SecondaryConfig(name="colour", path=str(path)))
    right: dict[int, list[bool]] = {identity: [] for identity in truth}
    for frame, expected in zip(VideoFileSource(SAMPLE_VIDEO), frames, strict=True):
        boxes = np.array([b[:4] for b in expected["boxes"]], np.float32)
        result = model.run(frame, boxes)
        for identity, label in zip(expected["ids"], result.label_ids.tolist(), strict=True):
            right[identity].append(label == truth[identity])
    scores = {
        f"{identity} {LABELS[truth[identity]]} {colours[identity]}": float(np.mean(hits))
        for identity, hits in right.items()
    }
    scores["all"] = float(np.mean([h for hits in right.values() for h in hits]))
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser(__doc__, ASSET)
    parser.add_argument("--scenes", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--video-seed", type=int, default=3)
    args = parse(parser, argv)
    if args.command == "train":
        model = train(args.seed, args.scenes, args.epochs)
        save(model, args.out, IMGSZ, "logits", METADATA)
    accuracy, count = held_out(args.out, 1000 + args.seed, 500)
    print(f"held-out synthetic crops: {accuracy:.3f} of {count}")
    scores = evaluate(args.out, args.video_seed)
    for name, value in scores.items():
        print(f"{name}: {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
