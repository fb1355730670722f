"""On-the-fly training data and the training loop for the demo detector.

Each batch mimics what the vstream pipeline feeds the model: procedural scenes
rendered at a random source resolution, usually round-tripped through H.264 (or
at least 4:2:0 chroma subsampling) like a decoded video frame, then letterboxed
the Ultralytics way (bilinear resize, centred, pad 114) onto a 320x320 canvas.
Assignment is FCOS-style (anchor points inside the box and near its centre, with
a size range per level). The loss is GIoU on boxes plus BCE on class scores
whose target for the true class is the predicted box's IoU, so scores rank
detections by localisation quality, which is what mAP rewards.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
import scenes
import torch
import torch.nn.functional as F
from model import STRIDES, Detector, decode_boxes, flatten_outputs, make_anchors
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from vstream.preprocess import PAD_VALUE, LetterboxGeometry

IMGSZ = 320
# Circumradius range of training objects in letterboxed (320) pixels. The sample
# video shows radii of about 8..20 px after its 0.5 letterbox gain (10..28 in the sample
# the model was trained for).
RADIUS_RANGE = (5.0, 64.0)
# Per-level object size ranges (longest box side, 320 px) used for assignment.
LEVEL_RANGES = {8: (0.0, 64.0), 16: (32.0, 1e9)}
CENTER_RADIUS = 2.0
# Each rendered background texture is reused (flipped / channel-permuted) this many times.
BACKGROUND_REUSE = 4


@dataclass
class TrainConfig:
    """Knobs for one training run; defaults are the settings used for the committed model."""

    iterations: int = 1000
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup: int = 60
    ema_decay: float = 0.998
    seed: int = 0
    threads: int = 2
    workers: int = 1
    log_every: int = 20


def letterbox(
    images: torch.Tensor, imgsz: int = IMGSZ, antialias: bool = False
) -> tuple[torch.Tensor, float, int, int]:
    """Letterbox a ``[B, 3, H, W]`` float (0..255) batch to ``[B, 3, imgsz, imgsz]`` in 0..1.

    Returns the batch plus gain and (top, left) so boxes can be mapped either way.
    """
    b, _, h, w = images.shape
    g = LetterboxGeometry.fit(w, h, imgsz, imgsz)
    if (g.resized_height, g.resized_width) != (h, w):
        images = F.interpolate(
            images,
            size=(g.resized_height, g.resized_width),
            mode="bilinear",
            align_corners=False,
            antialias=antialias,
        )
    canvas = images.new_full((b, 3, imgsz, imgsz), float(PAD_VALUE))
    canvas[:, :, g.top : g.top + g.resized_height, g.left : g.left + g.resized_width] = images
    return canvas / 255.0, g.gain, g.top, g.left


def h264_roundtrip(frames: np.ndarray, crf: int) -> np.ndarray:
    """Encode ``[B, H, W, 3]`` uint8 frames as one H.264 yuv420p stream and decode them again.

    This reproduces the blocking, ringing and chroma subsampling the model sees
    on real video, cheaply enough to do for every other batch.
    """
    b, h, w, _ = frames.shape
    enc = av.CodecContext.create("libx264", "w")
    enc.width, enc.height, enc.pix_fmt = w, h, "yuv420p"
    enc.time_base = Fraction(1, 25)
    enc.options = {"crf": str(crf), "preset": "veryfast", "threads": "1"}
    packets = []
    for i in range(b):
        frame = av.VideoFrame.from_ndarray(frames[i], format="rgb24")
        frame.pts = i
        packets += enc.encode(frame)
    packets += enc.encode(None)
    dec = av.CodecContext.create("h264", "r")
    out = [f.to_ndarray(format="rgb24") for p in packets for f in dec.decode(p)]
    out += [f.to_ndarray(format="rgb24") for f in dec.decode(None)]
    return np.stack(out)


def yuv420_roundtrip(frames: np.ndarray) -> np.ndarray:
    """Only the colour conversion and 4:2:0 chroma subsampling part of a video codec."""
    return np.stack(
        [
            av.VideoFrame.from_ndarray(f, format="rgb24")
            .reformat(format="yuv420p")
            .to_ndarray(format="rgb24")
            for f in frames
        ]
    )


def random_source_size(rng: np.random.Generator) -> tuple[int, int]:
    """Source frame size (h, w): often 16:9 around 640x360 like the sample, else anything."""
    if rng.random() < 0.4:
        long_side, aspect = rng.uniform(560, 720), 16 / 9
    else:
        long_side, aspect = rng.uniform(288, 640), math.exp(rng.uniform(math.log(0.5), math.log(2)))
    if aspect >= 1:
        w, h = long_side, long_side / aspect
    else:
        w, h = long_side * aspect, long_side
    return int(h) // 2 * 2, int(w) // 2 * 2


def make_batch(
    rng: np.random.Generator, batch_size: int
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One letterboxed training batch and its ``(n, 5)`` boxes in 320-canvas pixels."""
    h, w = random_source_size(rng)
    r = min(IMGSZ / h, IMGSZ / w)
    radius_range = (RADIUS_RANGE[0] / r, RADIUS_RANGE[1] / r)
    max_objects = int(np.clip(18 * (h * w * r * r) / (IMGSZ * IMGSZ), 5, 18))
    frames, boxes = [], []
    for i in range(batch_size):
        if i % BACKGROUND_REUSE == 0:
            background = scenes.random_background(rng, h, w)
        variant = scenes.background_variant(rng, background)
        img, b = scenes.random_scene(rng, variant, radius_range, max_objects)
        frames.append(img)
        boxes.append(b)
    batch = np.stack(frames)
    roll = rng.random()
    if roll < 0.5:
        batch = h264_roundtrip(batch, int(rng.integers(16, 34)))
    elif roll < 0.8:
        batch = yuv420_roundtrip(batch)
    images = torch.from_numpy(batch).permute(0, 3, 1, 2).float()
    if rng.random() < 0.3:
        images = (images + torch.randn_like(images) * rng.uniform(1, 5)).clamp(0, 255)
    # An antialiased resize now and then stands in for soft focus / other resizers.
    images, gain, top, left = letterbox(images, antialias=bool(rng.random() < 0.25))
    offset = torch.tensor([left, top, left, top], dtype=torch.float32)
    targets = []
    for b in boxes:
        t = torch.from_numpy(b)
        t[:, :4] = t[:, :4] * gain + offset
        targets.append(t)
    return images, targets


class BatchStream(IterableDataset):
    """Endless stream of batches; each worker gets its own seeded generator."""

    def __init__(self, batch_size: int, seed: int) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.seed = seed

    def __iter__(self) -> Iterator[tuple[torch.Tensor, list[torch.Tensor]]]:
        info = get_worker_info()
        worker = 0 if info is None else info.id
        if info is not None:
            torch.set_num_threads(1)
        rng = np.random.default_rng([self.seed, worker])
        while True:
            yield make_batch(rng, self.batch_size)


def assign(points: torch.Tensor, strides: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """Index of the ground-truth box each anchor point learns, or -1 for background.

    Positives are anchor points strictly inside the box, within ``CENTER_RADIUS``
    strides of its centre, on a level whose size range fits the box. Overlaps go
    to the smaller box. A box with no positive (tiny or oddly placed) gets its
    nearest stride-8 point so every object is learned.
    """
    num_anchors = points.shape[0]
    if gt.shape[0] == 0:
        return torch.full((num_anchors,), -1, dtype=torch.long)
    x1, y1, x2, y2 = gt[:, 0], gt[:, 1], gt[:, 2], gt[:, 3]
    px, py = points[:, :1], points[:, 1:]
    inside = (px > x1) & (px < x2) & (py > y1) & (py < y2)
    radius = CENTER_RADIUS * strides[:, None]
    near = ((px - (x1 + x2) / 2).abs() < radius) & ((py - (y1 + y2) / 2).abs() < radius)
    size = torch.maximum(x2 - x1, y2 - y1)
    level_ok = torch.zeros_like(inside)
    for s, (lo, hi) in LEVEL_RANGES.items():
        level_ok |= (strides[:, None] == s) & (size >= lo) & (size <= hi)
    area = (x2 - x1) * (y2 - y1)
    cost = torch.where(inside & near & level_ok, area.expand(num_anchors, -1), math.inf)
    best, index = cost.min(dim=1)
    index[best == math.inf] = -1
    missing = torch.ones(gt.shape[0], dtype=torch.bool)
    missing[index[index >= 0]] = False
    if missing.any():
        fine = strides == min(STRIDES)
        centres = torch.stack([(x1 + x2) / 2, (y1 + y2) / 2], 1)[missing]
        d = torch.cdist(centres, points) + (~fine).float() * 1e6
        index[d.argmin(dim=1)] = torch.nonzero(missing).squeeze(1)
    return index


def giou(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Element-wise IoU and generalised IoU of ``[n, 4]`` xyxy boxes."""
    lt = torch.maximum(a[:, :2], b[:, :2])
    rb = torch.minimum(a[:, 2:], b[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(1)
    area_a = (a[:, 2:] - a[:, :2]).prod(1)
    area_b = (b[:, 2:] - b[:, :2]).prod(1)
    union = area_a + area_b - inter + 1e-7
    iou = inter / union
    hull = (torch.maximum(a[:, 2:], b[:, 2:]) - torch.minimum(a[:, :2], b[:, :2])).prod(1) + 1e-7
    return iou, iou - (hull - union) / hull


def detection_loss(
    outputs: list[tuple[torch.Tensor, torch.Tensor]], targets: list[torch.Tensor]
) -> tuple[torch.Tensor, dict[str, float]]:
    """Quality focal loss on class scores plus GIoU loss on boxes, normalised by positives."""
    raw, logits = flatten_outputs(outputs)
    sizes = [(b.shape[2], b.shape[3]) for b, _ in outputs]
    points, strides = make_anchors(sizes)
    boxes = decode_boxes(raw, points, strides).permute(0, 2, 1)
    logits = logits.permute(0, 2, 1)
    cls_target = torch.zeros_like(logits)
    pred_pos, gt_pos, batch_idx, anchor_idx, cls_idx = [], [], [], [], []
    for i, gt in enumerate(targets):
        index = assign(points, strides, gt)
        pos = torch.nonzero(index >= 0).squeeze(1)
        matched = gt[index[pos]]
        pred_pos.append(boxes[i, pos])
        gt_pos.append(matched[:, :4])
        batch_idx.append(torch.full_like(pos, i))
        anchor_idx.append(pos)
        cls_idx.append(matched[:, 4].long())
    pred_b, gt_b = torch.cat(pred_pos), torch.cat(gt_pos)
    num_pos = max(pred_b.shape[0], 1)
    iou, g = giou(pred_b, gt_b)
    cls_target[torch.cat(batch_idx), torch.cat(anchor_idx), torch.cat(cls_idx)] = (
        iou.detach().clamp(min=0).to(cls_target.dtype)
    )
    # Positive anchors get plain BCE on every class (soft IoU target for the true class, 0
    # for the others) so classes are pushed apart at full strength; the many background
    # anchors are focal-down-weighted by p^2 so they do not swamp the positives.
    pos_mask = torch.zeros(logits.shape[:2], dtype=torch.bool)
    pos_mask[torch.cat(batch_idx), torch.cat(anchor_idx)] = True
    bce = F.binary_cross_entropy_with_logits(logits, cls_target, reduction="none")
    weight = torch.where(pos_mask[..., None], torch.ones_like(logits), logits.sigmoid() ** 2)
    loss_cls = (bce * weight).sum() / num_pos
    # pos_mask is row-major over (image, anchor), the same order the positives were gathered in.
    labels = torch.cat(cls_idx)
    acc = (
        (logits[pos_mask].argmax(1) == labels).float().mean() if labels.numel() else torch.zeros(())
    )
    loss_box = (1 - g).sum() / num_pos
    loss = loss_cls + 2.0 * loss_box
    stats = {
        "cls": loss_cls.item(),
        "box": loss_box.item(),
        "iou": iou.mean().item() if iou.numel() else 0.0,
        "acc": acc.item(),
    }
    return loss, stats


class EMA:
    """Exponential moving average of weights (with warm-up), which gives a steadier final model."""

    def __init__(self, model: nn.Module, decay: float, tau: float = 200.0) -> None:
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, 0

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.tau))
        msd = model.state_dict()
        for k, v in self.model.state_dict().items():
            if v.dtype.is_floating_point:
                v.mul_(d).add_(msd[k].detach(), alpha=1 - d)
            else:
                v.copy_(msd[k])


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on conv weights only; BatchNorm and biases are left alone."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim > 1 and name.endswith("weight") else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def train(cfg: TrainConfig, log: Callable[[str], None] = print) -> Detector:
    """Train from scratch and return the EMA model in eval mode."""
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    model = Detector(num_classes=len(scenes.NAMES)).to(memory_format=torch.channels_last)
    ema = EMA(model, cfg.ema_decay)
    opt = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.99))

    def lr_at(it: int) -> float:
        if it < cfg.warmup:
            return cfg.lr * (it + 1) / cfg.warmup
        progress = (it - cfg.warmup) / max(cfg.iterations - cfg.warmup, 1)
        return cfg.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))

    loader = DataLoader(
        BatchStream(cfg.batch_size, cfg.seed),
        batch_size=None,
        num_workers=cfg.workers,
        prefetch_factor=2 if cfg.workers else None,
    )
    model.train()
    start = time.time()
    running: dict[str, float] = {}
    for it, (images, targets) in enumerate(loader):
        if it >= cfg.iterations:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(it)
        outputs = model(images.contiguous(memory_format=torch.channels_last))
        loss, stats = detection_loss(outputs, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        ema.update(model)
        for k, v in stats.items():
            running[k] = running.get(k, 0.0) + v
        if (it + 1) % cfg.log_every == 0 or it + 1 == cfg.iterations:
            n = cfg.log_every if (it + 1) % cfg.log_every == 0 else (it + 1) % cfg.log_every
            msg = " ".join(f"{k}={v / n:.4f}" for k, v in running.items())
            log(
                f"iter {it + 1}/{cfg.iterations} lr={lr_at(it):.5f} {msg} "
                f"elapsed={time.time() - start:.0f}s"
            )
            running = {}
    return ema.model.to(memory_format=torch.contiguous_format).eval()
