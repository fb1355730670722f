"""``graphs-gpu``: CUDA graphs capture, and a replay computes what an eager run computes.

A captured graph replays kernels on the addresses it was captured with; if
a buffer moved after capture, or a bucket captured the wrong one, replay
would return stale numbers silently. Every bucket of every buffer is fed
the same noise and run both ways.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vstream.doctor.harness import build_detector
from vstream.doctor.report import Failed

GRAPH_TOLERANCE = 1e-3
"""Largest absolute difference allowed between a graph replay and an eager run."""


def graphs_match_eager(model_path: Path) -> tuple[str, dict[str, Any]]:
    """Build a CUDA detector with graphs and compare replay with eager on every bucket."""
    import torch

    from vstream.transfer import settle

    graphs = build_detector(model_path, "cuda", graphs=True)
    model = graphs.model
    if not model.cuda_graphs:
        raise Failed("the session did not enable CUDA graphs")
    worst = 0.0
    generator = torch.Generator(device="cpu").manual_seed(0)
    for buffer in model.buffers:
        noise = torch.rand(buffer.input.shape, generator=generator)
        buffer.input.copy_(noise.to(buffer.input.device, buffer.input.dtype))
        for bucket in buffer.buckets:
            replayed = [t.clone() for t in model.run(bucket)]
            eager = model.run(bucket, eager=True)
            for a, b in zip(replayed, eager, strict=True):
                worst = max(worst, float((a.float() - b.float()).abs().max()))
    settle(model.device)
    graph_count = len(model.buffers) * len(model.bucket_sizes)
    data = {"graphs": graph_count, "max_abs_difference": worst}
    if worst > GRAPH_TOLERANCE:
        raise Failed(f"graph replay differs from eager by {worst:.2e}")
    return (
        f"{graph_count} graphs captured at build; replay = eager (max abs difference {worst:.1e})"
    ), data
