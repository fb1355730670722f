"""Hostile input, round three: a fault in one stream or one secondary model stays there.

1. a file whose timestamps jump by 1e12 s, run with ``detect_fps``, must not
   hold the pipeline's shared preprocessing thread (nor the other streams);
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import frames_by_stream, tiny_detector, wait_for, write_timed_video, write_video

from vstream.config import parse_config
from vstream.engine import Engine

JUMP_MS = 10**15
"""1e12 s, in the milliseconds of a Matroska time stamp."""


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("isolation")
    tiny_detector(directory / "model.onnx")
    write_video(directory / "clip.mp4", frames=30, width=96, height=64)
    # 25 fps, then a jump of 1e12 s after frame 49 (a crafted or broken muxer).
    stamps = [40 * i for i in range(50)] + [JUMP_MS + 40 * i for i in range(50, 80)]
    write_timed_video(directory / "jump.mkv", stamps, width=96, height=64)
    return directory


def started_engine(media: Path, text: str) -> Engine:
    engine = Engine(parse_config(text, base_dir=media), base_dir=media)
    engine.start()
    return engine


@pytest.fixture
def stopped_at_end() -> Iterator[list[Engine]]:
    """Engines a test started, stopped whatever it did (bounded: a stuck stage is left)."""
    engines: list[Engine] = []
    yield engines
    for engine in engines:
        engine.stop(timeout=5.0)


def test_a_time_stamp_jump_with_detect_fps_holds_neither_its_pipeline_nor_the_others(
    media: Path, stopped_at_end: list[Engine]
) -> None:
    engine = started_engine(
        media,
        """
pipelines:
  - name: main
    model: {path: model.onnx}
    runtime: {device: cpu}
    sources:
      - {id: jump, uri: jump.mkv, detect_fps: 5}
      - {id: steady, uri: clip.mp4}
    sinks: [{type: jsonl, path: jump.jsonl}]
""",
    )
    stopped_at_end.append(engine)
    wait_for(engine.files_done, timeout=60, what="both files to be through the pipeline")
    engine.stop()
    assert frames_by_stream(media / "jump.jsonl") == {
        "jump": list(range(80)),
        "steady": list(range(30)),
    }
    (jump,) = [r for r in engine.readers() if r.id == "jump"]
    assert jump.cadence is not None
    # Every 5th frame on the 5 fps grid: frames 0, 5 .. 45, then 50 (the jump), 55 .. 75.
    assert jump.cadence.counts()["frames_detected"] == 16
