"""The host's cost of a batch, pinned by count (never by time): dispatches and host waits.

On a GPU every torch operation costs the host a dispatch and every
data-dependent size a wait; :mod:`vstream.bench.overhead` counts both on the
CPU, through the engine's own batch steps, with the plan a GPU gets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vstream.bench import overhead
from vstream.bench.overhead import count_batch, trivial_model

IMGSZ = 64
"""The counts do not depend on the sizes: 384x216 frames (1080p's shape) into 64 keep it quick."""


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trivial_model(tmp_path_factory.mktemp("overhead") / "trivial.onnx", imgsz=IMGSZ)


def gpu_plan(model: Path, batch: int) -> object:
    return overhead.gpu_plan(model, batch, IMGSZ)


def nv12_frames(count: int) -> list:
    return overhead.nv12_frames(count, size=(384, 216))


def test_a_batch_costs_one_gathering_dispatch_per_frame_and_the_rest_once(model: Path) -> None:
    small = count_batch(gpu_plan(model, 4), nv12_frames(4))
    large = count_batch(gpu_plan(model, 16), nv12_frames(16))
    assert large.letterbox - small.letterbox == 12, "one gather per frame more, nothing else"
    assert large.postprocess == small.postprocess, "postprocessing does not grow with frames"


def test_at_batch_32_a_frame_costs_at_most_ten_dispatches_and_a_batch_one_wait(
    model: Path,
) -> None:
    counts = count_batch(gpu_plan(model, 32), nv12_frames(32))
    assert counts.per_frame <= 10, counts
    assert counts.waits == 1, "the copy of the detections, and nothing before it"
