"""Streams added and removed through the API: motion masks bounded, DELETE's counters final.

1. Motion masks of thousands of corners stalled every stream of the pipeline
   for about 2 s per POST: rasterised point by point on the preprocessing
   thread the streams share, and without a cap.
2. ``DELETE /streams/{id}`` answered counters one record short: a frame in
   the stages when the stream was removed was counted after the answer.

The engine runs a tiny model on the CPU behind uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from helpers import eventually, tiny_detector, write_video

from vstream.config import parse_config
from vstream.config.cadence import MAX_MASK_CORNERS
from vstream.engine import Engine
from vstream.preprocess import motion
from vstream.server import ApiServer, create_app


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The API of an engine with one CPU pipeline; streams are added by each test."""
    directory = tmp_path_factory.mktemp("streams")
    tiny_detector(directory / "model.onnx")
    write_video(directory / "clip.mp4", frames=20, width=96, height=64)
    config = parse_config(
        "pipelines:\n  - name: main\n    model: {path: model.onnx}\n"
        "    runtime: {device: cpu}\n    sinks: [{type: jsonl, path: out.jsonl}]\n",
        base_dir=directory,
    )
    engine = Engine(config, base_dir=directory)
    engine.start()
    server = ApiServer(create_app(engine), port=0)
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()
        engine.stop(timeout=20)


def circle(corners: int) -> list[list[float]]:
    """A polygon of ``corners`` corners round the middle of the 96x64 clip."""
    import math

    return [
        [
            48 + 30 * math.cos(2 * math.pi * i / corners),
            32 + 20 * math.sin(2 * math.pi * i / corners),
        ]
        for i in range(corners)
    ]


@pytest.mark.parametrize(
    ("masks", "message"),
    [
        ([circle(MAX_MASK_CORNERS + 1)], f"at most {MAX_MASK_CORNERS}"),
        ([circle(400)] * 3, f"masks have 1200 corners in all; at most {MAX_MASK_CORNERS}"),
    ],
    ids=["one-mask", "in-all"],
)
def test_motion_masks_are_capped_in_corners(api: httpx.Client, masks: list, message: str) -> None:
    body = {"id": "masked", "uri": "clip.mp4", "motion": {"masks": masks}}
    answer = api.post("/streams", json=body)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"], answer.text


def test_motion_masks_are_rasterised_on_the_streams_reader_thread(
    api: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not on the preprocessing thread every stream of the pipeline shares."""
    threads: list[str] = []
    rasterise = motion.mask_grid

    def spy(*args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return rasterise(*args, **kwargs)

    monkeypatch.setattr(motion, "mask_grid", spy)
    body = {
        "id": "gated",
        "uri": "clip.mp4",
        "loop": True,
        "motion": {"masks": [circle(MAX_MASK_CORNERS)]},
    }
    assert api.post("/streams", json=body).status_code == 201
    try:
        assert eventually(lambda: api.get("/streams/gated").json()["frames_processed"] >= 3)
    finally:
        api.delete("/streams/gated")
    assert threads == ["reader-gated"]


@pytest.mark.parametrize("policy", ["block", "latest"])
def test_delete_answers_the_final_counters(api: httpx.Client, policy: str) -> None:
    """decoded = processed + failed + dropped + skipped in DELETE's answer: nothing in flight,
    and the frames the ``latest`` policy dropped still counted once the stream left the intake."""
    dropped = []
    for round_ in range(3):
        stream = f"{policy}-{round_}"
        body = {"id": stream, "uri": "clip.mp4", "loop": True, "policy": policy, "queue_size": 1}
        assert api.post("/streams", json=body).status_code == 201
        url = f"/streams/{stream}"
        assert eventually(lambda url=url: api.get(url).json()["frames_processed"] >= 5)
        removed = api.delete(url)
        assert removed.status_code == 200, removed.text
        counts = removed.json()["removed"]
        settled = sum(
            counts[k]
            for k in ("frames_processed", "frames_failed", "frames_dropped", "frames_skipped")
        )
        assert counts["frames_decoded"] == settled, counts
        dropped.append(counts["frames_dropped"])
    assert policy == "block" or sum(dropped) > 0, "the test needs drops to show they are kept"
