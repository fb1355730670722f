"""A small anchor-free detector and the wrapper that exports it in YOLOv8 ONNX layout.

Network: Conv-BN-SiLU backbone with CSP blocks down to stride 16, an SPPF block
for context, a two-level PAN neck (strides 8 and 16) and decoupled per-level
heads. Box heads predict left/top/right/bottom distances from each anchor point
(cell centre) in units of the level stride; class heads predict one logit per
class. ``ExportWrapper`` turns this into the ``[batch, 4 + nc, N]`` tensor of
``cx, cy, w, h`` in input pixels plus sigmoid class scores that Ultralytics
YOLOv8 exports produce, so the vstream post-processing can consume it unchanged.
"""

from __future__ import annotations

import math

import onnx
import torch
import torch.nn.functional as F
from torch import nn

STRIDES: tuple[int, ...] = (8, 16)


class ConvBNAct(nn.Module):
    """Conv2d (no bias) + BatchNorm + SiLU, the basic YOLO-style unit."""

    def __init__(self, c_in: int, c_out: int, k: int = 3, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """Two 3x3 convs with a residual connection."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.cv1 = ConvBNAct(c, c)
        self.cv2 = ConvBNAct(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.cv2(self.cv1(x))


class CSPBlock(nn.Module):
    """Cross-stage-partial block: only half the channels go through the bottlenecks.

    Every bottleneck output is kept and concatenated, which gives a rich
    multi-depth feature for few parameters (the C2f idea).
    """

    def __init__(self, c_in: int, c_out: int, n: int = 1) -> None:
        super().__init__()
        self.hidden = c_out // 2
        self.cv1 = ConvBNAct(c_in, 2 * self.hidden, 1)
        self.blocks = nn.ModuleList(Bottleneck(self.hidden) for _ in range(n))
        self.cv2 = ConvBNAct((2 + n) * self.hidden, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(self.cv1(x).chunk(2, dim=1))
        for block in self.blocks:
            parts.append(block(parts[-1]))
        return self.cv2(torch.cat(parts, dim=1))


class SPPF(nn.Module):
    """Spatial pyramid pooling (fast): cheap large receptive field at the coarsest level."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.cv1 = ConvBNAct(c, c // 2, 1)
        self.cv2 = ConvBNAct(c // 2 * 4, c, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.pool(y[-1]))
        return self.cv2(torch.cat(y, dim=1))


class Head(nn.Module):
    """Decoupled head for one level: box distances and class logits from separate branches."""

    def __init__(self, c_in: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.box = nn.Sequential(
            ConvBNAct(c_in, hidden), ConvBNAct(hidden, hidden), nn.Conv2d(hidden, 4, 1)
        )
        self.cls = nn.Sequential(
            ConvBNAct(c_in, hidden), ConvBNAct(hidden, hidden), nn.Conv2d(hidden, num_classes, 1)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.box(x), self.cls(x)


class Detector(nn.Module):
    """Backbone + PAN neck + heads; returns raw per-level outputs (used for training)."""

    def __init__(self, num_classes: int = 4, widths: tuple[int, ...] = (16, 32, 64, 96)) -> None:
        super().__init__()
        c1, c2, c3, c4 = widths
        self.stem = nn.Sequential(ConvBNAct(3, c1, 3, 2), ConvBNAct(c1, c2, 3, 2), CSPBlock(c2, c2))
        self.stage3 = nn.Sequential(ConvBNAct(c2, c3, 3, 2), CSPBlock(c3, c3, 2))
        self.stage4 = nn.Sequential(ConvBNAct(c3, c4, 3, 2), CSPBlock(c4, c4), SPPF(c4))
        # Both neck outputs use c3 channels: the stride-16 level only has to handle
        # larger, easier objects, and this keeps the ONNX file under 2 MB.
        self.top_down = CSPBlock(c4 + c3, c3)
        self.down = ConvBNAct(c3, c3, 3, 2)
        self.bottom_up = CSPBlock(c3 + c4, c3)
        self.heads = nn.ModuleList(Head(c3, 32, num_classes) for _ in STRIDES)
        self._init_biases()

    def _init_biases(self) -> None:
        """Start with distances of ~2 strides and a 1% class prior, which stabilises early steps."""
        for head in self.heads:
            box_out, cls_out = head.box[-1], head.cls[-1]
            nn.init.constant_(box_out.bias, math.log(math.e**2 - 1))
            nn.init.normal_(box_out.weight, std=0.01)
            nn.init.constant_(cls_out.bias, -math.log(99.0))
            nn.init.normal_(cls_out.weight, std=0.01)

    def forward(self, x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        p3 = self.stage3(self.stem(x))
        p4 = self.stage4(p3)
        n3 = self.top_down(torch.cat([F.interpolate(p4, scale_factor=2.0, mode="nearest"), p3], 1))
        n4 = self.bottom_up(torch.cat([self.down(n3), p4], 1))
        return [head(feat) for head, feat in zip(self.heads, (n3, n4), strict=True)]


def make_anchors(
    sizes: list[tuple[int, int]], strides: tuple[int, ...] = STRIDES
) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchor points (cell centres, in pixels) and their strides for the given feature sizes.

    Order is level-major then row-major, matching ``flatten_outputs``.
    """
    points, stride_list = [], []
    for (h, w), s in zip(sizes, strides, strict=True):
        ys, xs = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
        points.append(torch.stack([xs, ys], -1).reshape(-1, 2) * s)
        stride_list.append(torch.full((h * w,), float(s)))
    return torch.cat(points), torch.cat(stride_list)


def flatten_outputs(
    outputs: list[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate per-level outputs to ``[B, 4, N]`` raw distances and ``[B, nc, N]`` logits."""
    box = torch.cat([b.flatten(2) for b, _ in outputs], dim=2)
    cls = torch.cat([c.flatten(2) for _, c in outputs], dim=2)
    return box, cls


def decode_boxes(raw: torch.Tensor, points: torch.Tensor, strides: torch.Tensor) -> torch.Tensor:
    """Raw ``[B, 4, N]`` distance logits -> ``[B, 4, N]`` ``x1, y1, x2, y2`` in pixels.

    Softplus keeps distances positive and smooth; scaling by the stride lets one
    head weight serve every level.
    """
    dist = F.softplus(raw) * strides
    xy = points.t()
    return torch.cat([xy - dist[:, :2], xy + dist[:, 2:]], dim=1)


class ExportWrapper(nn.Module):
    """Fixed-size inference graph with YOLOv8's output layout ``[B, 4 + nc, N]``."""

    def __init__(self, detector: Detector, imgsz: int = 320) -> None:
        super().__init__()
        self.detector = detector
        sizes = [(imgsz // s, imgsz // s) for s in STRIDES]
        points, strides = make_anchors(sizes)
        self.register_buffer("points", points)
        self.register_buffer("strides", strides)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        raw, logits = flatten_outputs(self.detector(images))
        xyxy = decode_boxes(raw, self.points, self.strides)
        cxcy = (xyxy[:, :2] + xyxy[:, 2:]) / 2
        wh = xyxy[:, 2:] - xyxy[:, :2]
        return torch.cat([cxcy, wh, logits.sigmoid()], dim=1)


def count_parameters(model: nn.Module) -> int:
    """Number of parameters (BatchNorm running statistics excluded)."""
    return sum(p.numel() for p in model.parameters())


def export_onnx(
    detector: Detector,
    path: str,
    names: tuple[str, ...],
    imgsz: int = 320,
    opset: int = 17,
    description: str = "vstream demo detector (procedural shapes)",
) -> None:
    """Export with a dynamic batch axis and Ultralytics-style metadata.

    The TorchScript-based exporter (``dynamo=False``) gives a compact, plain
    opset-17 graph that every onnxruntime build accepts.
    """
    wrapper = ExportWrapper(detector, imgsz).eval()
    dummy = torch.zeros(1, 3, imgsz, imgsz)
    torch.onnx.export(
        wrapper,
        (dummy,),
        path,
        input_names=["images"],
        output_names=["output0"],
        dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
        opset_version=opset,
        do_constant_folding=True,
        dynamo=False,
    )
    proto = onnx.load(path)
    # The tracer leaves the non-batch output dims symbolic; pin them like Ultralytics does
    # (``[batch, 4 + nc, N]``) so consumers can read the layout from the graph.
    dims = proto.graph.output[0].type.tensor_type.shape.dim
    dims[1].dim_value = 4 + len(names)
    dims[2].dim_value = int(wrapper.points.shape[0])
    metadata = {
        "description": description,
        "task": "detect",
        "stride": str(max(STRIDES)),
        "imgsz": str([imgsz, imgsz]),
        "names": str(dict(enumerate(names))),
    }
    for key, value in metadata.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.producer_name = "vstream tools/demo_assets"
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, path)
