"""The demo segmentation model: the demo detector and a mask head of our own, Ultralytics' layout.

The demo detector (``vstream/assets/demo.onnx``, our architecture and weights)
is kept as it is; a small mask head reads its two neck features (strides 8
and 16, the tensors its box heads read) and adds, as Ultralytics'
segmentation exports do, ``nm`` mask coefficients to every box row
(``output0`` ``[B, 4 + nc + nm, N]``) and a prototypes output
(``output1`` ``[B, nm, H/4, W/4]``). Only the head is trained, on features the
detector computes for procedural scenes whose instance masks are exact
(``tools/demo_assets/scenes.py``), so this takes minutes on a CPU:

- the prototypes: 3x3 conv (64 -> 16), ReLU, x2 nearest upsampling, 3x3 conv,
  ReLU, 1x1 conv to ``nm``; the coefficients: per level a 3x3 conv, ReLU and a
  1x1 conv to ``nm``. ReLU, not SiLU: the graph's last Sigmoid stays the class
  scores' one, which ``tools/parity/tempered.py`` tempers;
- loss: binary cross-entropy of ``coefficients . prototypes`` against each
  object's mask at prototype resolution, inside its box (as Ultralytics
  trains), for every anchor point inside the object.

The head's graph is exported by torch and joined to the detector's graph; the
metadata says ``task: segment``. Its class scores are then tempered as the parity
detector's are (``tools/parity/tempered.py``), so that the one model serves the demo
and the parity checks against Ultralytics with a real model's spread of scores. Run from
the repository root::

    .venv/bin/python tools/seg/demo_model.py [--output vstream/assets/demo_seg.onnx]
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from onnx import helper
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "demo_assets"))
sys.path.insert(0, str(ROOT / "tools" / "parity"))

import scenes  # noqa: E402
import tempered  # noqa: E402
import train as demo_train  # noqa: E402

from vstream.assets import ASSETS_DIR, DEMO_MODEL  # noqa: E402

OUTPUT = ASSETS_DIR / "demo_seg.onnx"
PROTOTYPES = 16
"""``nm``: Ultralytics uses 32; 16 are plenty for four convex-ish shapes."""
FEATURES = (
    "/detector/top_down/cv2/act/Mul_output_0",  # stride 8, what heads.0 reads
    "/detector/bottom_up/cv2/act/Mul_output_0",  # stride 16, what heads.1 reads
)
IMGSZ = 320
STRIDES = (8, 16)


class MaskHead(nn.Module):
    """Prototypes from the stride-8 feature, coefficients for every anchor of both levels."""

    def __init__(self, channels: int = 64, hidden: int = 16, nm: int = PROTOTYPES) -> None:
        super().__init__()
        self.proto = nn.Sequential(
            nn.Conv2d(channels, hidden, 3, padding=1),
            nn.ReLU(),
            nn.Upsample(scale_factor=2.0, mode="nearest"),
            nn.Conv2d(hidden, hidden, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(hidden, nm, 1),
        )
        self.coef = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(channels, hidden, 3, padding=1), nn.ReLU(), nn.Conv2d(hidden, nm, 1)
            )
            for _ in STRIDES
        )

    def forward(self, p3: torch.Tensor, p4: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Coefficients ``[B, nm, N]`` in the detector's anchor order; prototypes."""
        coef = torch.cat(
            [head(f).flatten(2) for head, f in zip(self.coef, (p3, p4), strict=True)], 2
        )
        return coef, self.proto(p3)


def scene_with_masks(
    rng: np.random.Generator, height: int, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """A training scene and its objects' full-frame masks ``[n, H, W]`` (bool), captured from
    ``scenes.draw_shape`` as it paints each one."""
    drawn: list[np.ndarray] = []
    paint = scenes.draw_shape

    def recording(image: np.ndarray, shape: scenes.Shape, shading: np.ndarray | None = None):
        box = paint(image, shape, shading)
        if box is not None:
            window, y0, x0 = scenes.shape_mask(shape, height, width)
            full = np.zeros((height, width), bool)
            full[y0 : y0 + window.shape[0], x0 : x0 + window.shape[1]] = window
            drawn.append(full)
        return box

    background = scenes.random_background(rng, height, width)
    with mock.patch.object(scenes, "draw_shape", recording):
        image, _ = scenes.random_scene(rng, background, (12.0, 48.0), 9)
    return image, np.asarray(drawn, bool).reshape(-1, height, width)


def dataset(count: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` letterboxed images ``[3, 320, 320]`` (0..1) and their masks ``[n, 320, 320]``."""
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(count):
        height, width = demo_train.random_source_size(rng)
        image, masks = scene_with_masks(rng, height, width)
        letterboxed, _, _, _ = demo_train.letterbox(
            torch.from_numpy(image).permute(2, 0, 1)[None].float()
        )
        mask_images = torch.from_numpy(masks).float()[:, None].expand(-1, 3, -1, -1) * 255
        mask_boxed = demo_train.letterbox(mask_images)[0][:, 0] if len(masks) else None
        items.append(
            (
                letterboxed[0].numpy(),
                (mask_boxed > 0.5).numpy()
                if mask_boxed is not None
                else np.zeros((0, 320, 320), bool),
            )
        )
    return items


def features(session: ort.InferenceSession, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p3, p4 = session.run(list(FEATURES), {"images": images})
    return p3, p4


def feature_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """The detector with its two neck features as outputs."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in FEATURES)
    return ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])


def anchor_points() -> torch.Tensor:
    """Anchor points (x, y) in input pixels, level-major then row-major (the detector's order)."""
    points, _ = demo_train.make_anchors([(IMGSZ // s, IMGSZ // s) for s in STRIDES], STRIDES)
    return points


def mask_loss(
    coef: torch.Tensor, protos: torch.Tensor, masks: list[torch.Tensor], points: torch.Tensor
) -> torch.Tensor:
    """BCE of each positive anchor's mask against its object's, inside the object's box."""
    _, _, ph, pw = protos.shape
    losses = []
    for b, objects in enumerate(masks):
        for full in objects:
            ys, xs = torch.nonzero(full, as_tuple=True)
            if len(ys) == 0:
                continue
            px = points[:, 0].long().clamp(0, IMGSZ - 1)
            py = points[:, 1].long().clamp(0, IMGSZ - 1)
            positive = full[py, px].nonzero()[:, 0]
            if len(positive) == 0:
                continue
            target = F.avg_pool2d(full[None, None].float(), IMGSZ // ph)[0, 0]
            x1, x2 = int(xs.min()) * pw // IMGSZ, int(xs.max()) * pw // IMGSZ + 1
            y1, y2 = int(ys.min()) * ph // IMGSZ, int(ys.max()) * ph // IMGSZ + 1
            logits = torch.einsum(
                "kn,nhw->khw", coef[b, :, positive].t(), protos[b, :, y1:y2, x1:x2]
            )
            crop = target[y1:y2, x1:x2].expand_as(logits)
            losses.append(F.binary_cross_entropy_with_logits(logits, crop))
    return torch.stack(losses).mean()


def train_head(
    items: list, session: ort.InferenceSession, steps: int, batch: int, seed: int
) -> MaskHead:
    torch.manual_seed(seed)
    images = np.stack([i for i, _ in items]).astype(np.float32)
    p3s, p4s = [], []
    for start in range(0, len(images), 32):
        p3, p4 = features(session, images[start : start + 32])
        p3s.append(p3)
        p4s.append(p4)
    p3_all, p4_all = torch.from_numpy(np.concatenate(p3s)), torch.from_numpy(np.concatenate(p4s))
    masks = [torch.from_numpy(m) for _, m in items]
    head = MaskHead()
    optimiser = torch.optim.AdamW(head.parameters(), lr=3e-3, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, 3e-3, total_steps=steps)
    points = anchor_points()
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    for step in range(steps):
        chosen = rng.choice(len(items), batch, replace=False)
        coef, protos = head(p3_all[chosen], p4_all[chosen])
        loss = mask_loss(coef, protos, [masks[i] for i in chosen], points)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        if (step + 1) % 50 == 0:
            print(
                f"step {step + 1}/{steps} loss {loss.item():.4f} "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
    return head.eval()


def join(detector: onnx.ModelProto, head: MaskHead) -> onnx.ModelProto:
    """The detector's graph with the head's graph fed by its two features; output0 gains the
    coefficients, output1 is the prototypes."""
    buffer = io.BytesIO()
    p3 = torch.zeros(1, 64, IMGSZ // 8, IMGSZ // 8)
    p4 = torch.zeros(1, 64, IMGSZ // 16, IMGSZ // 16)
    torch.onnx.export(
        head,
        (p3, p4),
        buffer,
        input_names=["p3", "p4"],
        output_names=["coef", "output1"],
        dynamic_axes={
            "p3": {0: "batch"},
            "p4": {0: "batch"},
            "coef": {0: "batch"},
            "output1": {0: "batch"},
        },
        opset_version=17,
        do_constant_folding=True,
        dynamo=False,
    )
    part = onnx.load_from_string(buffer.getvalue())
    renamed = {
        "p3": FEATURES[0],
        "p4": FEATURES[1],
        "coef": "mask_coefficients",
        "output1": "output1",
    }

    def name(value: str) -> str:
        return renamed.get(value, f"mask_head/{value}" if value else value)

    model = onnx.ModelProto()
    model.CopyFrom(detector)
    graph = model.graph
    for node in graph.node:
        node.output[:] = ["detections" if o == "output0" else o for o in node.output]
    for node in part.graph.node:
        node.input[:] = [name(i) for i in node.input]
        node.output[:] = [name(o) for o in node.output]
        node.name = f"mask_head/{node.name}"
        graph.node.append(node)
    for tensor in part.graph.initializer:
        tensor.name = name(tensor.name)
        graph.initializer.append(tensor)
    graph.node.append(
        helper.make_node("Concat", ["detections", "mask_coefficients"], ["output0"], axis=1)
    )
    del graph.output[:]
    anchors = sum((IMGSZ // s) ** 2 for s in STRIDES)
    graph.output.extend(
        [
            helper.make_tensor_value_info(
                "output0", onnx.TensorProto.FLOAT, ["batch", 8 + PROTOTYPES, anchors]
            ),
            helper.make_tensor_value_info(
                "output1", onnx.TensorProto.FLOAT, ["batch", PROTOTYPES, IMGSZ // 4, IMGSZ // 4]
            ),
        ]
    )
    for prop in model.metadata_props:
        if prop.key == "task":
            prop.value = "segment"
    onnx.checker.check_model(model)
    return model


def temper(joined: Path, output: Path) -> Path:
    """``joined`` with its class scores tempered as the parity detector's
    (``tools/parity/tempered.py``: real models' scores spread, the demo's do not), at ``output``."""
    tempered.temper(joined, output)
    model = onnx.load(str(output))
    for prop in model.metadata_props:
        if prop.key == "description":
            prop.value = (
                "vstream demo segmentation model: the demo detector, its class scores tempered "
                f"(logit - {tempered.BIAS}) / {tempered.TEMPERATURE}, and a mask head "
                "(tools/seg/demo_model.py)"
            )
    onnx.save(model, str(output))
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    detector = onnx.load(str(DEMO_MODEL))
    started = time.perf_counter()
    items = dataset(args.images, args.seed)
    print(f"{len(items)} images in {time.perf_counter() - started:.0f} s", flush=True)
    head = train_head(items, feature_session(detector), args.steps, args.batch, args.seed)
    with tempfile.TemporaryDirectory(prefix="demo-seg-") as tmp:
        joined = Path(tmp) / "joined.onnx"
        onnx.save(join(detector, head), str(joined))
        temper(joined, args.output)
    print(f"{args.output} ({args.output.stat().st_size / 2**20:.2f} MB)")


if __name__ == "__main__":
    main()
