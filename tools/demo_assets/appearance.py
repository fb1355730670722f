"""The demo appearance embedder: a vector per object that stays put while the object moves.

For the tracker's appearance cost (``tracking.appearance``): crops of the same
object should map close together, crops of different objects apart. In the
demo scenes an object *is* its shape class and its flat RGB colour
(:class:`scenes.Shape`); rotation, size, the background behind it, how well
the detector's box fits, and a neighbour covering part of it all change from
frame to frame and must not matter.

Why a batch contrastive loss and not identity classification: identities are
continuous (any RGB colour with any of four shapes), and the tracker meets
objects the network never saw, so a softmax head over a fixed list of training
identities would learn that list. Instead every batch holds ``P`` identities
drawn for it, ``K`` views of each, and the loss is the supervised contrastive
loss (Khosla et al. 2020) on the unit vectors at temperature 0.1: each view is
pulled towards the other views of its identity and pushed from every other
view in the batch. A third of the identities come as near twins of another
(same shape, a colour 25 to 70 RGB away), so the network learns to tell close
colours apart rather than just hue families.

Each view is drawn on its own textured background (``scenes.random_background``),
rotated and sized at random, half of them with another shape overlapping it
(in front or behind, sometimes of the same shape class), some with neighbours
and shading, half round-tripped through 4:2:0 video colour, and cut with the
pipeline's own crop (:func:`vstream.cascade.crops.crop_rgb`, 32x32,
``resize: linear``) from the exact box jittered like a detector's.

The vectors are L2-normalised inside the graph (and :class:`SecondaryModel`
normalises again, harmlessly), so the ONNX file is usable on its own.

Usage (from the repository root)::

    .venv/bin/python tools/demo_assets/appearance.py train     # writes assets/appearance.onnx
    .venv/bin/python tools/demo_assets/appearance.py evaluate  # separation on sample.mp4

Evaluation decodes ``sample.mp4`` through vstream (:class:`vstream.VideoFileSource`),
reads every ground-truth box with :class:`vstream.cascade.SecondaryModel`, and
compares the cosine similarity of pairs of the same identity with pairs of
different identities: their means, the verification accuracy at the best
single threshold, and how often a box's nearest identity (by the mean vector
of that identity's boxes in the previous 25 frames) is its own.
"""

from __future__ import annotations

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
ASSET = REPO_ROOT / "vstream" / "assets" / "appearance.onnx"

IMGSZ = 32

METADATA = {
    "kind": "embedding",
    "description": "vstream demo appearance embedder (procedural shapes), unit vectors",
}
"""What the model says of itself, beside the crop settings :mod:`crop_export` writes."""
DIMENSION = 32
CANVAS = 96
"""Side of the background each view is drawn on."""
TEMPERATURE = 0.1


def make_identities(rng: np.random.Generator, count: int) -> list[tuple[int, np.ndarray, float]]:
    """``count`` identities ``(class, rgb, cross arm)``; a third are near twins of another."""
    out: list[tuple[int, np.ndarray, float]] = []
    while len(out) < count:
        if out and rng.random() < 1 / 3:
            cls, colour, arm = out[int(rng.integers(len(out)))]
            direction = rng.normal(size=3)
            step = rng.uniform(25, 70) * direction / np.linalg.norm(direction)
            out.append((cls, np.clip(colour + step, 0, 255), arm))
        else:
            out.append(
                (
                    int(rng.integers(len(scenes.NAMES))),
                    rng.uniform(0, 255, 3),
                    float(rng.uniform(0.22, 0.36)),
                )
            )
    return out


def _shape(cls: int, cx: float, cy: float, radius: float, colour: np.ndarray, arm: float, rng):
    return scenes.Shape(
        cls, cx, cy, radius, rng.uniform(0, 2 * math.pi), tuple(int(c) for c in colour), arm
    )


def draw_view(
    rng: np.random.Generator, identity: tuple[int, np.ndarray, float]
) -> tuple[np.ndarray, np.ndarray]:
    """One view of ``identity`` on a fresh background: the image and the jittered box."""
    cls, colour, arm = identity
    image = scenes.random_background(rng, CANVAS, CANVAS)
    radius = float(rng.uniform(14, 34))
    cx, cy = CANVAS / 2 + rng.uniform(-6, 6, 2)
    target = _shape(cls, cx, cy, radius, colour, arm, rng)
    others = []
    if rng.random() < 0.5:  # an overlapping neighbour: in front or behind
        other_cls = cls if rng.random() < 0.4 else int(rng.integers(len(scenes.NAMES)))
        other_radius = radius * rng.uniform(0.7, 1.2)
        angle = rng.uniform(0, 2 * math.pi)
        reach = (radius + other_radius) * rng.uniform(0.55, 1.0)
        others.append(
            (
                _shape(other_cls, cx + reach * math.cos(angle), cy + reach * math.sin(angle),
                       other_radius, rng.uniform(0, 255, 3), float(rng.uniform(0.22, 0.36)), rng),
                rng.random() < 0.6,
            )
        )  # fmt: skip
    if rng.random() < 0.3:  # a neighbour near the box, not touching it
        angle = rng.uniform(0, 2 * math.pi)
        other_radius = radius * rng.uniform(0.5, 1.0)
        reach = radius + other_radius + rng.uniform(2, 10)
        others.append(
            (
                _shape(int(rng.integers(len(scenes.NAMES))), cx + reach * math.cos(angle),
                       cy + reach * math.sin(angle), other_radius, rng.uniform(0, 255, 3),
                       float(rng.uniform(0.22, 0.36)), rng),
                False,
            )
        )  # fmt: skip
    for other, in_front in others:
        if not in_front:
            scenes.draw_shape(image, other)
    shading = None
    if rng.random() < 0.3:
        side = int(2 * radius) + 6
        amp = rng.uniform(0.03, 0.12)
        shading = 1 + amp * (2 * scenes._smooth_noise(rng, side, side, 2) - 1)
    box = scenes.draw_shape(image, target, shading)
    assert box is not None
    for other, in_front in others:
        if in_front:
            scenes.draw_shape(image, other)
    width, height = box[2] - box[0], box[3] - box[1]
    jitter = rng.normal(0, 0.07, 4) * [width, height, width, height]
    return image, np.asarray(box, np.float32) + jitter.astype(np.float32)


def make_views(
    rng: np.random.Generator, identities: list, views: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(len(identities) * views, 3, 32, 32)`` crops in 0..255 and their identity index."""
    crops, labels = [], []
    for index, identity in enumerate(identities):
        drawn = [draw_view(rng, identity) for _ in range(views)]
        images = np.stack([image for image, _ in drawn])
        video_like = rng.random(views) < 0.5
        if video_like.any():
            images[video_like] = yuv420_roundtrip(images[video_like])
        for image, (_, box) in zip(images, drawn, strict=True):
            rgb = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float()
            crops.append(crop_rgb(rgb, torch.from_numpy(box[None]), (IMGSZ, IMGSZ)))
        labels += [index] * views
    return torch.cat(crops), torch.tensor(labels)


class AppearanceNet(nn.Module):
    """Five Conv-BN-SiLU blocks (three strided) down to 4x4, a linear layer on the flattened
    map (it keeps where things are: the object is in the middle, a neighbour at the edge), and
    L2 normalisation. About 90k weights. Takes 0..1 RGB, gives unit vectors of
    :data:`DIMENSION`."""

    def __init__(self) -> None:
        super().__init__()

        def block(cin: int, cout: int, stride: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU()
            )

        self.features = nn.Sequential(
            block(3, 24, 2), block(24, 32, 1), block(32, 48, 2), block(48, 48, 1), block(48, 48, 2)
        )
        self.head = nn.Linear(48 * 4 * 4, DIMENSION)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(self.head(self.features(x).flatten(1)), dim=1)


def supcon_loss(vectors: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Supervised contrastive loss of unit ``vectors``: each row against every other row."""
    logits = vectors @ vectors.T / TEMPERATURE
    self_mask = torch.eye(len(vectors), dtype=torch.bool)
    logits = logits.masked_fill(self_mask, -1e9)
    positive = (labels[:, None] == labels[None, :]) & ~self_mask
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    return -(log_prob * positive).sum(1).div(positive.sum(1).clamp(min=1)).mean()


def train(seed: int, identities: int, views: int, epochs: int, per_batch: int) -> AppearanceNet:
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    start = time.perf_counter()
    crops, _ = make_views(rng, make_identities(rng, identities), views)
    print(f"{len(crops)} crops of {identities} identities in {time.perf_counter() - start:.0f} s")
    inputs = (crops / 255).view(identities, views, 3, IMGSZ, IMGSZ)
    model = AppearanceNet()
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    steps_per_epoch = identities // per_batch
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, 3e-3, total_steps=epochs * steps_per_epoch
    )
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(identities)
        total = 0.0
        for step in range(steps_per_epoch):
            chosen = order[step * per_batch : (step + 1) * per_batch]
            x = inputs[chosen].reshape(-1, 3, IMGSZ, IMGSZ)
            flip = torch.rand(len(x)) < 0.5
            x = torch.where(flip[:, None, None, None], x.flip(3), x)
            x = (x * torch.empty(len(x), 1, 1, 1).uniform_(0.92, 1.08)).clamp(0, 1)
            y = chosen.repeat_interleave(views)
            loss = supcon_loss(model(x), y)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += float(loss.detach())
        print(f"epoch {epoch + 1}/{epochs}: loss {total / steps_per_epoch:.3f}", flush=True)
    return model.eval()


def separation(vectors: np.ndarray, ids: np.ndarray) -> dict[str, float]:
    """Same- against different-identity cosine similarity over every pair of rows."""
    similarity = vectors @ vectors.T
    upper = np.triu(np.ones_like(similarity, dtype=bool), k=1)
    same = (ids[:, None] == ids[None, :]) & upper
    different = (ids[:, None] != ids[None, :]) & upper
    s, d = similarity[same], similarity[different]
    thresholds = np.linspace(-1, 1, 401)
    # Verification accuracy with the two kinds of pair weighted equally (they are not as many).
    balanced = [((s >= t).mean() + (d < t).mean()) / 2 for t in thresholds]
    best = int(np.argmax(balanced))
    return {
        "same mean": float(s.mean()),
        "same 5th percentile": float(np.percentile(s, 5)),
        "different mean": float(d.mean()),
        "different 95th percentile": float(np.percentile(d, 95)),
        "different max": float(d.max()),
        "verification accuracy": float(balanced[best]),
        "at threshold": float(thresholds[best]),
    }


def held_out(path: Path, seed: int, identities: int) -> dict[str, float]:
    """:func:`separation` on fresh synthetic views (a seed training never used), 4 per identity."""
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    crops, labels = make_views(rng, make_identities(rng, identities), 4)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (vectors,) = session.run(None, {"images": (crops / 255).numpy()})
    return separation(vectors, labels.numpy())


def sample_vectors(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every ground-truth box of ``sample.mp4`` read by :class:`SecondaryModel`: vectors,
    identities and frame indices."""
    from vstream import VideoFileSource
    from vstream.assets import SAMPLE_GROUND_TRUTH, SAMPLE_VIDEO
    from vstream.cascade import SecondaryModel
    from vstream.config.secondary import SecondaryConfig

    frames = json.loads(SAMPLE_GROUND_TRUTH.read_text())["frames"]
    model = SecondaryModel(SecondaryConfig(name="look", path=str(path), kind="embedding"))
    vectors, ids, index = [], [], []
    for frame, expected in zip(VideoFileSource(SAMPLE_VIDEO), frames, strict=True):
        boxes = np.array([b[:4] for b in expected["boxes"]], np.float32)
        vectors.append(model.run(frame, boxes).embeddings)
        ids += expected["ids"]
        index += [expected["frame"]] * len(boxes)
    return np.concatenate(vectors), np.array(ids), np.array(index)


def nearest_identity(vectors: np.ndarray, ids: np.ndarray, frames: np.ndarray) -> float:
    """Share of boxes whose nearest identity, among those on screen in the same frame, is
    their own (each identity by the normalised mean of its vectors over the previous 25 frames):
    what the tracker's bank does."""
    right = []
    for frame in np.unique(frames):
        here = np.flatnonzero(frames == frame)
        past = (frames < frame) & (frames >= frame - 25)
        known = [i for i in np.unique(ids[here]) if (past & (ids == i)).any()]
        if len(known) < 2:
            continue
        bank = np.stack([vectors[past & (ids == i)].mean(axis=0) for i in known])
        bank /= np.linalg.norm(bank, axis=1, keepdims=True)
        for row in here:
            if ids[row] in known:
                right.append(known[int(np.argmax(bank @ vectors[row]))] == ids[row])
    return float(np.mean(right))


def evaluate(path: Path) -> dict[str, float]:
    vectors, ids, frames = sample_vectors(path)
    scores = separation(vectors, ids)
    scores["nearest identity (previous 25 frames)"] = nearest_identity(vectors, ids, frames)
    scores["boxes"] = float(len(ids))
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser(__doc__, ASSET)
    parser.add_argument("--identities", type=int, default=6000)
    parser.add_argument("--views", type=int, default=4)
    parser.add_argument("--per-batch", type=int, default=64, help="identities per batch")
    parser.add_argument("--epochs", type=int, default=20)
    args = parse(parser, argv)
    if args.command == "train":
        started = time.perf_counter()
        model = train(args.seed, args.identities, args.views, args.epochs, args.per_batch)
        print(f"trained in {time.perf_counter() - started:.0f} s")
        save(model, args.out, IMGSZ, "embeddings", METADATA)
    print("held-out synthetic views (500 identities, 4 views each):")
    for name, value in held_out(args.out, 1000 + args.seed, 500).items():
        print(f"  {name}: {value:.3f}")
    print("sample.mp4 ground-truth boxes:")
    for name, value in evaluate(args.out).items():
        print(f"  {name}: {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
