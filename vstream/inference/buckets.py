"""Batch buckets: a few fixed batch shapes, each bound to ONNX Runtime once.

A batch of ``n`` frames runs in the smallest bucket that holds ``n`` (1, 2, 4,
8 ... up to the maximum batch), so a partly filled batch costs about what it
holds instead of a full batch, while every shape the model sees is known in
advance and bound once. That is what CUDA graphs need: one captured graph per
bucket, replayed with the same addresses every run.

The buckets of a :class:`BatchBuffer` are views of one input allocation (the
first ``k`` slots of an NCHW tensor are contiguous), so a frame can be
letterboxed into its slot before anyone knows how full its batch will get, and
whichever bucket then runs reads it where it is.

On CUDA each bucket runs in an ONNX Runtime session of its own
(:func:`session_per_bucket`), so a session only ever sees one input shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch


def bucket_sizes(max_batch: int, fixed_batch: int | None) -> tuple[int, ...]:
    """The batch sizes to bind: powers of two below ``max_batch``, then ``max_batch``.

    A model with a fixed batch has exactly one bucket, its own batch.
    """
    if fixed_batch is not None:
        return (fixed_batch,)
    sizes = []
    size = 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return (*sizes, max_batch)


def session_per_bucket(device: torch.device, providers: Sequence[str]) -> bool:
    """Whether each bucket gets an ONNX Runtime session of its own: on CUDA, unless TensorRT
    runs the model (``providers``: the short names asked for, in order).

    The CUDA provider keeps, for each convolution, the cuDNN plan of the last
    input shape it ran, and builds a new one whenever the shape changes: a new
    cuDNN frontend graph, validated, its heuristics queried and its plans built
    (``Conv::UpdateState`` and ``CreateCudnnFeExecutionPlan`` in ONNX Runtime's
    ``cuda/nn/conv.cc``). Batches of a live pipeline change size from run to run
    (1, 2, 1, 4 frames...), so one session shared by the buckets would rebuild
    every convolution's plan on most runs; a session per bucket builds each once
    (on an H100, the demo detector: 468 ms a run shared, 1.4 ms each its own;
    one live camera 7 frames/s, then 30: BENCHMARKS.md, "Live streams on one H100").
    The price is a copy of the weights and an arena per bucket on the device.
    TensorRT builds one engine whose profiles cover every bucket, and the CPU
    provider keeps no per-shape plan, so both keep one session.
    """
    return device.type == "cuda" and (not providers or providers[0] != "tensorrt")


def sessions_by_size(
    sizes: Sequence[int], largest: Any, open_another: Callable[[], Any], own: bool
) -> dict[int, Any]:
    """The session each bucket size runs in: ``largest`` for the largest size, and for every
    other size a session of its own (``open_another()``) where ``own``
    (:func:`session_per_bucket`), else ``largest`` too."""
    return {size: open_another() if own and size != sizes[-1] else largest for size in sizes}


@dataclass(eq=False)
class Bucket:
    """One batch shape of one buffer: its input view, its outputs and its IO binding."""

    size: int
    input: torch.Tensor
    """``[size, 3, H, W]``: a view of the first ``size`` slots of the buffer's input."""
    outputs: list[torch.Tensor | None]
    """Preallocated outputs in model order; None where the size is only known per run."""
    binding: Any
    """The ``onnxruntime.IOBinding`` with the input and outputs bound by address, once."""
    run_options: Any
    """The ``onnxruntime.RunOptions`` of every run of this bucket (its CUDA graph id)."""
    graph_id: int | None
    """The ``gpu_graph_id`` this bucket's runs carry when CUDA graphs are on, else None."""
    session: Any
    """The ``onnxruntime.InferenceSession`` that runs it (on CUDA its own: see
    :func:`session_per_bucket`)."""


@dataclass(eq=False)
class BatchBuffer:
    """A model input of the maximum batch and one :class:`Bucket` per batch size.

    The engine keeps several buffers so that frames can be letterboxed into
    one while the model reads another and postprocessing reads a third.
    """

    input: torch.Tensor
    """``[max_batch, 3, H, W]``, allocated once; preprocessing writes into its slots."""
    buckets: tuple[Bucket, ...]
    """In increasing size; the last one is the full batch."""

    def bucket_for(self, frames: int) -> Bucket:
        """The smallest bucket that holds ``frames`` frames."""
        for bucket in self.buckets:
            if bucket.size >= frames:
                return bucket
        raise ValueError(f"{frames} frames do not fit a batch of {self.buckets[-1].size}")

    @property
    def largest(self) -> Bucket:
        return self.buckets[-1]
