"""The cascade counted: metrics, stream status and summary agree with the records written."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from secondary_models import linear_model

from tests.helpers import run_cli
from vstream import assets
from vstream.analytics.events import NO_ATTRIBUTES
from vstream.cascade.attributes import Attributes
from vstream.cascade.counts import label_counts
from vstream.cascade.stage import Cascade
from vstream.config import parse_data
from vstream.config.secondary import SecondaryConfig
from vstream.engine import Engine
from vstream.frame import Frame, PixelFormat
from vstream.results import ATTRIBUTES, Detections, FrameResult


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of metric ``name`` in an exposition: its labels -> its value."""
    found = {}
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', match.group(1))))
            found[labels] = float(match.group(2))
    return found


def finished(engine: Engine, timeout: float) -> None:
    """Wait until every decoded frame was processed and its record reached the sink
    (``files_done`` alone can come while the last batch is still in the stages)."""
    deadline = time.monotonic() + timeout
    (sink,) = engine.pipelines["main"].sinks
    while time.monotonic() < deadline:
        s = engine.stream("cam")
        settled = s.frames_processed + s.frames_failed + s.frames_dropped + s.frames_skipped
        if (
            engine.files_done()
            and settled == s.frames_decoded
            and sink.stats.delivered == s.frames_processed
        ):
            return
        time.sleep(0.05)
    raise AssertionError("the stream did not finish in time")


@contextmanager
def finished_engine(tmp_path: Path, end_seconds: float, **pipeline: Any) -> Iterator[Engine]:
    """An engine running the demo video's first ``end_seconds`` (stream ``cam``, records in
    ``out.jsonl``) with ``pipeline``'s extra keys, once every frame's record is written;
    stopped after the block."""
    source = {"id": "cam", "uri": str(assets.SAMPLE_VIDEO), "end_seconds": end_seconds}
    main = {
        "name": "main",
        "model": {"path": str(assets.DEMO_MODEL)},
        "runtime": {"device": "cpu"},
        "sources": [source],
        "sinks": [{"type": "jsonl", "path": "out.jsonl"}],
        **pipeline,
    }
    engine = Engine(parse_data({"pipelines": [main]}, base_dir=tmp_path), base_dir=tmp_path)
    engine.start()
    try:
        finished(engine, 120)
        yield engine
    finally:
        engine.stop(timeout=30)


def test_metrics_status_and_summary_count_the_readings_the_records_have(tmp_path: Path) -> None:
    colour = {"name": "colour", "path": str(assets.COLOUR_MODEL), "reinfer_seconds": 0.5}
    with finished_engine(tmp_path, 2.0, analytics={"tracking": {}}, secondary=[colour]) as engine:
        status = engine.stream("cam").to_json()
        text = engine.metrics.render().decode()
        summary = next(s for s in engine.summary() if s.id == "cam")
        engine.remove_stream("cam")
        after = engine.metrics.render().decode()
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    read = [d["attributes"]["colour"] for r in records for d in r["detections"]]
    fresh = [a for a in read if a["fresh"]]
    cached = len(read) - len(fresh)
    labels = Counter(a["label"] for a in fresh)
    assert fresh and cached, "the run should both read and carry readings"
    assert len(labels) > 1

    readings = samples(text, "vstream_secondary_readings_total")
    key = (("model", "colour"), ("pipeline", "main"))
    assert readings[(*key, ("reading", "fresh"))] == len(fresh)
    assert readings[(*key, ("reading", "cached"))] == cached
    runs = samples(text, "vstream_secondary_runs_total")[key]
    frames_read = sum(
        any(d["attributes"]["colour"]["fresh"] for d in r["detections"]) for r in records
    )
    assert runs == frames_read
    assert samples(text, "vstream_secondary_seconds_total")[key] > 0
    by_label = samples(text, "vstream_attribute_readings_total")
    assert by_label == {
        (("label", label), ("model", "colour"), ("pipeline", "main"), ("stream", "cam")): n
        for label, n in labels.items()
    }

    shown = status["attributes"]["colour"]
    assert (shown["fresh"], shown["cached"], shown["runs"]) == (len(fresh), cached, runs)
    assert shown["labels"] == dict(labels)
    assert list(shown["labels"].values()) == sorted(labels.values(), reverse=True)
    assert summary.attributes["colour"]["labels"] == dict(labels)

    # A removed stream's label series go; the pipeline's totals stay (counters never go back).
    assert "vstream_attribute_readings_total{" not in after
    assert samples(after, "vstream_secondary_readings_total") == readings


def test_a_pipeline_without_secondary_models_shows_no_attributes(tmp_path: Path) -> None:
    with finished_engine(tmp_path, 0.5) as engine:
        status = engine.stream("cam").to_json()
        text = engine.metrics.render().decode()
    assert "attributes" not in status
    assert "vstream_secondary" not in text and "vstream_attribute" not in text


def attributes(label_ids: list[int], fresh: list[bool], probabilities: np.ndarray) -> Attributes:
    count = len(label_ids)
    return Attributes(
        np.asarray(label_ids, dtype=np.int64),
        np.ones(count, dtype=np.float32),
        np.asarray(fresh, dtype=bool),
        np.ones(count, dtype=bool),
        None,
        probabilities.astype(np.float32),
    )


def test_label_counts_count_fresh_readings_only_and_each_label_of_a_multi_label_model() -> None:
    probabilities = np.array([[0.9, 0.6, 0.1], [0.2, 0.7, 0.8], [0.9, 0.1, 0.1], [0.1, 0.9, 0.1]])
    read = attributes([0, 2, 0, 1], [True, True, True, False], probabilities)
    labels = ("red", "green", "blue")
    assert label_counts(read, labels, multi_label=False, threshold=0.5) == {"red": 2, "blue": 1}
    assert label_counts(read, labels, multi_label=True, threshold=0.5) == {
        "red": 2,
        "green": 2,
        "blue": 1,
    }
    embedding = Attributes(
        np.full(2, -1), np.ones(2), np.ones(2, bool), np.ones(2, bool), np.ones((2, 4)), None
    )
    assert label_counts(embedding, (), multi_label=False, threshold=0.5) == {}


def test_a_model_that_gives_no_numbers_reads_nothing_counted_written_or_tracked(
    tmp_path: Path,
) -> None:
    """A model whose every output is NaN (a broken export): its argmax would be the first
    label. Its objects stay unread: no value in records, no count, no track reading, and
    no vector for the tracker; its runs are still counted."""
    nan = np.eye(3)
    nan[0, 0] = np.nan
    path = str(linear_model(tmp_path / "nan.onnx", nan))
    configs = [
        SecondaryConfig(name="kind", path=path),
        SecondaryConfig(name="look", path=path, kind="embedding", keep_embedding=True),
    ]
    cascade = Cascade(configs, {0: "a"}, device="cpu", appearance="look")
    cascade.counts("s")
    picture = torch.full((40, 100, 3), 200, dtype=torch.uint8)
    frame = Frame(picture, PixelFormat.RGB24, 100, 40, stream_id="s")
    boxes = np.array([[0, 0, 40, 40], [50, 0, 90, 40]], np.float32)
    detections = Detections(
        boxes, np.full(2, 0.9, np.float32), np.zeros(2, int), [1, 2], class_names={0: "a"}
    )
    vectors = cascade.embed(frame, detections)
    assert vectors is not None and not vectors.any()  # a row of zeros: no vector
    result = cascade.apply(
        frame,
        FrameResult("s", 0, 0.0, 100, 40, detections),
        detected=True,
        live_tracks=[1, 2],
        embeddings=vectors,
    )
    assert result.detections.data[ATTRIBUTES].tolist() == [None, None]
    figures = {name: c.to_json() for name, c in cascade.stream_counts()["s"].items()}
    assert {name: (f["fresh"], f["cached"], f["runs"]) for name, f in figures.items()} == {
        "kind": (0, 0, 1),
        "look": (0, 0, 1),
    }
    assert figures["kind"]["labels"] == {}
    assert cascade.attributes_of("s")(1) is NO_ATTRIBUTES


def test_the_run_summary_says_what_each_secondary_model_read(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    result = run_cli("run", "--secondary", assets.COLOUR_MODEL, "--output", out)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    read = [d["attributes"]["colour"] for r in records for d in r["detections"]]
    labels = Counter(a["label"] for a in read)
    ordered = sorted(labels.items(), key=lambda item: (-item[1], item[0]))
    seen = ", ".join(f"{label} {n}" for label, n in ordered)
    line = next(x for x in result.stderr.splitlines() if " colour read " in x)
    assert f"colour read {len(read)} objects in {len(records)} runs" in line
    assert line.endswith(f"carried 0 readings: {seen}")
