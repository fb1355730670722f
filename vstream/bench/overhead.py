"""Host overhead per frame, measured on any machine: what the GPU path costs the CPU.

On a GPU the pipeline's limit is the host, not the device: every torch
operation is a dispatch through Python and ATen (microseconds each, holding
the GIL), and every host wait stops the thread that issued it. Those costs
are the same on a CPU, so they can be counted here, without a GPU, on the
same code: synthetic NV12 frames (as NVDEC hands them) at 1080p go through
the device letterbox (:mod:`vstream.preprocess.resample`), a trivial model of
the YOLOv8 layout, and the device postprocess, with the plan a GPU gets.

Reported, for 1, 8 and 32 streams:

- **host CPU ms per frame**: the process's CPU time over the frames (every
  thread), not wall time, since these machines are shared. On a CPU it also
  holds the arithmetic the GPU would do, so it is an upper bound of the
  host's cost there;
- **torch dispatches** per frame and per batch, by stage, counted on one
  thread by a dispatch mode (every ATen operation the stage issues, views
  included: each costs the host about the same);
- **host waits per batch**: operations that make the host wait for a CUDA
  stream (a data-dependent size, a copy to the host), counted where they are
  dispatched whatever the device.

``vstream bench --overhead`` prints the table (``--json`` for a document).
"""

from __future__ import annotations

import collections
import dataclasses
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vstream.frame import ColourMatrix, ColourSpace, Frame, PixelFormat
from vstream.transfer import transfers

SOURCE_SIZE = (1920, 1080)
"""Width and height of the synthetic frames: 1080p, as cameras send it."""

IMGSZ = 320
"""The model input, as the demo detector's: 1080p shrinks 6x into it."""

CLASSES = 80

BOXES_PER_FRAME = 24
"""Boxes the trivial model scores above 0.25 in every frame, some overlapping (NMS has work)."""

SYNCING_OPS = frozenset(
    {
        "aten::nonzero",
        "aten::_local_scalar_dense",  # .item(), bool(tensor)
        "aten::masked_select",
        "aten::unique_consecutive",
        "aten::_unique2",
        "aten::bincount",
        "torchvision::nms",  # its CUDA kernel keeps boxes through a boolean mask
    }
)
"""Operations whose CUDA implementation makes the host wait for the stream."""


class DispatchCounter(TorchDispatchMode):
    """Counts the ATen operations dispatched on the thread it is entered on.

    A dispatch mode sees every operation below autograd, views included, as
    the backend receives it; composite operations arrive as their parts.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.views = 0
        self.waits = 0
        """Operations that would make the host wait on CUDA (:data:`SYNCING_OPS`, and copies
        from a device to the host)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.name()
        self.ops[name] += 1
        self.views += bool(getattr(func, "is_view", False))
        if name in SYNCING_OPS or _copies_to_host(name, args, kwargs or {}):
            self.waits += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def _copies_to_host(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether a copy operation reads a device tensor into host memory."""
    if name == "aten::copy_" and len(args) >= 2:
        target, source = args[0], args[1]
        return target.device.type == "cpu" and source.device.type != "cpu"
    if name == "aten::_to_copy" and args:
        device = kwargs.get("device")
        return args[0].device.type != "cpu" and device is not None and device.type == "cpu"
    return False


def anchors(imgsz: int) -> int:
    """Rows of a YOLOv8 output at ``imgsz``: one per cell of strides 8, 16 and 32."""
    return (imgsz // 8) ** 2 + (imgsz // 16) ** 2 + (imgsz // 32) ** 2


def trivial_model(path: Path, seed: int = 0, imgsz: int = IMGSZ) -> Path:
    """A YOLOv8-layout detector (``[batch, 84, 2100]`` at 320) that costs almost nothing.

    Its output is a fixed table plus ``0 * mean(image)``: the image still
    flows through the bound input. The table holds :data:`BOXES_PER_FRAME`
    boxes scored 0.3 to 0.9 (pairs of them overlapping) and low scores
    elsewhere, so postprocessing finds, suppresses and keeps real boxes.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    rows = anchors(imgsz)
    table = np.zeros((1, 4 + CLASSES, rows), np.float32)
    table[0, 4:] = rng.uniform(0.0, 0.2, (CLASSES, rows))
    table[0, 0:2] = rng.uniform(imgsz / 16, imgsz * 15 / 16, (2, rows))
    table[0, 2:4] = rng.uniform(imgsz / 40, imgsz / 8, (2, rows))
    chosen = rng.choice(rows, BOXES_PER_FRAME, replace=False)
    for i, anchor in enumerate(chosen):
        table[0, 4 + i % 5, anchor] = rng.uniform(0.3, 0.9)
        if i % 2:  # a near copy of the previous box: NMS suppresses one of the two
            table[0, 0:4, anchor] = table[0, 0:4, chosen[i - 1]] + rng.uniform(-1, 1, 4)
            table[0, 4:, anchor] = 0.0
            table[0, 4 + (i - 1) % 5, anchor] = rng.uniform(0.3, 0.9)
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], axes=[1, 2, 3], keepdims=0),
        helper.make_node("Reshape", ["mean", "per_frame"], ["mean3"]),
        helper.make_node("Mul", ["mean3", "zero"], ["nothing"]),
        helper.make_node("Add", ["table", "nothing"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "trivial_yolov8",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, imgsz, imgsz])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 84, rows])],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.zeros((1, 1, 1), np.float32), "zero"),
            numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "per_frame"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def nv12_frames(
    count: int,
    stream_id: str = "0",
    distinct: int = 4,
    seed: int = 0,
    size: tuple[int, int] = SOURCE_SIZE,
) -> list[Frame]:
    """``count`` NV12 frames of noise (``distinct`` pictures in turn), as NVDEC hands them."""
    width, height = size
    rng = np.random.default_rng(seed)
    pictures = [
        torch.from_numpy(rng.integers(16, 236, (height * 3 // 2, width), dtype=np.uint8))
        for _ in range(distinct)
    ]
    colour = ColourSpace(ColourMatrix.BT709, full_range=False)
    return [
        Frame(
            pictures[i % distinct],
            PixelFormat.NV12,
            width,
            height,
            stream_id=stream_id,
            index=i,
            pts_seconds=i / 30,
            colour=colour,
        )
        for i in range(count)
    ]


def gpu_plan(model: Path, batch: int, imgsz: int = IMGSZ) -> Any:
    """The detector as a GPU pipeline runs it, on the CPU: one run at a time, ``batch`` frames."""
    from vstream.detector import Detector
    from vstream.postprocess.decode import FixedShapes

    detector = Detector(
        model, device="cpu", imgsz=imgsz, batch_size=batch, concurrent_runs=1, intra_op_threads=1
    )
    detector.fixed_shapes = FixedShapes(detector.postprocessor)  # as on CUDA
    return detector


@dataclasses.dataclass(frozen=True)
class StageCounts:
    """Dispatches and host waits of one batch, by stage."""

    batch: int
    letterbox: int
    infer: int
    postprocess: int
    waits: int
    """Host waits of the whole batch (all stages)."""
    views: int

    @property
    def total(self) -> int:
        return self.letterbox + self.infer + self.postprocess

    @property
    def per_frame(self) -> float:
        return self.total / self.batch


def count_batch(detector: Any, frames: Sequence[Frame]) -> StageCounts:
    """Dispatches and host waits of one batch through the engine's own steps, on this thread.

    The batch is built and finished by :class:`vstream.engine.stages.Batch`,
    as the overlapped stages do it; the first batch warms up caches and plans.
    """
    from vstream.engine.intake import Arrival
    from vstream.engine.stages import Batch

    def one() -> tuple[DispatchCounter, ...]:
        counters = (DispatchCounter(), DispatchCounter(), DispatchCounter())
        batch = Batch(0)
        with counters[0]:
            for frame in frames:
                batch.add(Arrival(frame, frame.stream_id, 0.0))
            batch.letterbox(detector)
        with counters[1]:
            raw = detector.infer(batch.buffer, batch.detected)
        with counters[2]:
            batch.postprocess(detector, raw)
        return counters

    one()
    _, copies_before = transfers.snapshot()
    letterbox, infer, post = one()
    _, copies_after = transfers.snapshot()
    return StageCounts(
        batch=len(frames),
        letterbox=letterbox.total,
        infer=infer.total,
        postprocess=post.total,
        # and each copy to the host, which on CUDA waits for its event
        waits=letterbox.waits + infer.waits + post.waits + copies_after - copies_before,
        views=letterbox.views + infer.views + post.views,
    )


@dataclasses.dataclass(frozen=True)
class StreamsRun:
    """Every stream's frames through the overlapped pipeline: what it cost the process."""

    streams: int
    frames: int
    cpu_seconds: float
    wall_seconds: float

    @property
    def cpu_ms_per_frame(self) -> float:
        return 1000 * self.cpu_seconds / self.frames


def run_streams(
    detector: Any, streams: int, frames_per_stream: int, size: tuple[int, int] = SOURCE_SIZE
) -> StreamsRun:
    """``streams`` synthetic streams through :func:`vstream.engine.detect_iter`; CPU per frame."""
    from vstream.engine import detect_iter

    sources = [nv12_frames(frames_per_stream, str(s), seed=s, size=size) for s in range(streams)]
    warm = nv12_frames(detector.batch_size * 2, "warm", size=size)
    for _ in detect_iter(detector, [warm]):
        pass
    cpu, wall = time.process_time(), time.perf_counter()
    count = sum(1 for _ in detect_iter(detector, sources))
    return StreamsRun(streams, count, time.process_time() - cpu, time.perf_counter() - wall)


def measure(
    stream_counts: Sequence[int] = (1, 8, 32),
    batch: int = 32,
    frames: int = 1024,
    count_batches: Sequence[int] = (1, 8, 32),
    source_size: tuple[int, int] = SOURCE_SIZE,
    imgsz: int = IMGSZ,
) -> dict[str, Any]:
    """The whole benchmark: stage counts at each of ``count_batches``, then each stream count.

    ``frames`` is the total over the streams of a run (each stream gets its share).
    Small ``source_size`` and ``imgsz`` (64) take the arithmetic out, which a GPU does: what
    is left is the host's bookkeeping.
    """
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        model = trivial_model(Path(folder) / "trivial.onnx", imgsz=imgsz)
        counts = []
        for size in count_batches:
            detector = gpu_plan(model, size, imgsz)
            counts.append(count_batch(detector, nv12_frames(size, size=source_size)))
        detector = gpu_plan(model, batch, imgsz)
        runs = [run_streams(detector, s, max(1, frames // s), source_size) for s in stream_counts]
    return {
        "source": f"{source_size[0]}x{source_size[1]} NV12",
        "imgsz": imgsz,
        "batch": batch,
        "stages": [dataclasses.asdict(c) | {"per_frame": c.per_frame} for c in counts],
        "streams": [dataclasses.asdict(r) | {"cpu_ms_per_frame": r.cpu_ms_per_frame} for r in runs],
    }


def report(result: dict[str, Any]) -> Iterator[str]:
    """The benchmark's tables as lines of text."""
    yield (
        f"host overhead: {result['source']} -> {result['imgsz']}, trivial YOLOv8-layout model, "
        "GPU plan on the CPU (1 run, torch 1 thread)"
    )
    yield ""
    yield "| batch | letterbox | model | postprocess | dispatches / frame | host waits / batch |"
    yield "|---:|---:|---:|---:|---:|---:|"
    for c in result["stages"]:
        yield (
            f"| {c['batch']} | {c['letterbox']} | {c['infer']} | {c['postprocess']} | "
            f"{c['per_frame']:.1f} | {c['waits']} |"
        )
    yield ""
    yield f"| streams (batch {result['batch']}) | frames | host CPU ms / frame | wall s |"
    yield "|---:|---:|---:|---:|"
    for r in result["streams"]:
        yield (
            f"| {r['streams']} | {r['frames']} | {r['cpu_ms_per_frame']:.2f} | "
            f"{r['wall_seconds']:.1f} |"
        )


__all__ = [
    "DispatchCounter",
    "StageCounts",
    "StreamsRun",
    "count_batch",
    "measure",
    "nv12_frames",
    "report",
    "run_streams",
    "trivial_model",
]
