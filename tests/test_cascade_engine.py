"""The cascade in the engine: the demo colour classifier reads the demo detector's objects."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import vstream
from tests.helpers import run_cli
from vstream.assets import COLOUR_MODEL, DEMO_MODEL, SAMPLE_VIDEO
from vstream.config.secondary import SecondaryConfig
from vstream.inference.secondary_spec import check_secondary

LABELS_IN_ORDER = check_secondary(SecondaryConfig(name="colour", path=str(COLOUR_MODEL))).labels
LABELS = set(LABELS_IN_ORDER)


def pipelines_file(
    tmp_path: Path, secondary: str, extra: str = "", source: str = "", sink: str = "{type: stdout}"
) -> Path:
    """A pipelines file: the demo detector on the sample, the secondary model ``secondary``
    (one flow mapping), ``extra`` pipeline keys, ``source`` keys after the sample's uri."""
    config = tmp_path / "pipelines.yaml"
    config.write_text(
        f"""
pipelines:
  - name: main
    model: {{path: {DEMO_MODEL}}}
{extra}
    secondary:
      - {secondary}
    sources:
      - {{id: cam, uri: {SAMPLE_VIDEO}{source}}}
    sinks:
      - {sink}
"""
    )
    return config


def run_yaml(
    tmp_path: Path, secondary: str, extra: str = "", source: str = ""
) -> list[dict[str, Any]]:
    out = tmp_path / "out.jsonl"
    colour = f"{{name: colour, path: {COLOUR_MODEL}, {secondary}}}"
    config = pipelines_file(tmp_path, colour, extra, source, f"{{type: jsonl, path: {out}}}")
    result = run_cli("run", config)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def attributes(records: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    return [d.get("attributes") for r in records for d in r["detections"]]


def test_without_tracking_every_detection_is_read_fresh(tmp_path: Path) -> None:
    records = run_yaml(tmp_path, "max_batch: 4")
    assert [r["frame"] for r in records] == list(range(len(records)))
    read = attributes(records)
    assert read and all(a is not None for a in read)
    assert {a["colour"]["label"] for a in read} <= LABELS
    assert all(a["colour"]["fresh"] and 0 < a["colour"]["score"] <= 1 for a in read)
    assert len({a["colour"]["label"] for a in read}) > 2  # the shapes have several colours


def test_with_tracking_readings_are_carried_and_read_again_when_old(tmp_path: Path) -> None:
    records = run_yaml(
        tmp_path, "reinfer_seconds: 0.5, regrow: 100", "    analytics: {tracking: {}}"
    )
    assert [r["frame"] for r in records] == list(range(len(records)))
    fresh_at: dict[int, list[float]] = defaultdict(list)
    carried = 0
    for record in records:
        for detection in record["detections"]:
            value = detection["attributes"]["colour"]
            assert value["label"] in LABELS
            if "track_id" not in detection:
                assert value["fresh"]  # nothing to carry a reading on
            elif value["fresh"]:
                fresh_at[detection["track_id"]].append(record["pts"])
            else:
                carried += 1
    assert carried > 0
    gaps = [b - a for times in fresh_at.values() for a, b in pairwise(times)]
    assert gaps, "no track was read a second time"
    assert min(gaps) >= 0.5 - 1e-6


def test_predicted_frames_carry_the_tracks_readings(tmp_path: Path) -> None:
    records = run_yaml(
        tmp_path,
        "reinfer_seconds: 0",
        "    analytics: {tracking: {}}",
        ", detect_every: 3",
    )
    predicted = [d for r in records for d in r["detections"] if d.get("predicted")]
    assert predicted
    assert all(not d["attributes"]["colour"]["fresh"] for d in predicted if "attributes" in d)
    assert any("attributes" in d for d in predicted)
    detected = [d for r in records for d in r["detections"] if not d.get("predicted")]
    assert all(d["attributes"]["colour"]["fresh"] for d in detected)  # reinfer_seconds 0


def test_on_classes_restricts_which_detections_are_read(tmp_path: Path) -> None:
    records = run_yaml(tmp_path, "on: {classes: [0]}")
    detections = [d for r in records for d in r["detections"]]
    assert {d["class_id"] for d in detections} - {0}, "the video has other classes"
    for detection in detections:
        assert ("attributes" in detection) == (detection["class_id"] == 0)


def refused(tmp_path: Path, secondary: str, extra: str = "") -> list[str]:
    """The stderr lines of ``vstream run`` on a demo pipeline with ``secondary`` (and
    ``extra`` keys), which must refuse it: exit 2, no traceback."""
    config = pipelines_file(tmp_path, secondary, extra)
    result = run_cli("run", config)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()


def test_an_on_class_the_detector_lacks_fails_with_one_line(tmp_path: Path) -> None:
    lines = refused(tmp_path, f"{{name: colour, path: {COLOUR_MODEL}, on: {{classes: [0, 99]}}}}")
    assert len(lines) == 1 and "on.classes [99] are not classes of the detector" in lines[0]


def test_run_flags_add_a_secondary_model_named_after_its_file(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    result = run_cli(
        "run", "-q", "--secondary", COLOUR_MODEL, "--on-classes", "0,2", "--output", out
    )
    assert result.returncode == 0, result.stderr
    detections = [
        d for line in out.read_text().splitlines() for d in json.loads(line)["detections"]
    ]
    assert {d["class_id"] for d in detections} - {0, 2}, "the video has other classes"
    for detection in detections:
        read = detection.get("attributes")
        assert (read is not None) == (detection["class_id"] in (0, 2))
        assert read is None or read[COLOUR_MODEL.stem]["label"] in LABELS


def test_run_flags_refuse_on_classes_alone_and_a_missing_model(tmp_path: Path) -> None:
    alone = run_cli("run", "-q", "--on-classes", "1")
    assert alone.returncode == 2
    assert alone.stderr.strip() == "vstream: error: --on-classes: applies to --secondary models"
    missing = run_cli("run", "-q", "--secondary", tmp_path / "nope.onnx")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.count("\n") == 1 and "nope.onnx" in missing.stderr


def test_the_appearance_flag_tracks_with_the_embedder_and_names_itself_in_errors(
    tmp_path: Path,
) -> None:
    from vstream.assets import APPEARANCE_MODEL
    from vstream.evaluation_tracks import evaluate_tracks

    truth = json.loads(SAMPLE_VIDEO.with_name("sample_ground_truth.json").read_text())
    scores = {}
    for flags in ((), ("--appearance", APPEARANCE_MODEL)):
        out = tmp_path / f"out{len(flags)}.jsonl"
        result = run_cli("run", "--track", *flags, "--output", out)
        assert result.returncode == 0, result.stderr
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert not any("attributes" in d for r in records for d in r["detections"])
        scores[bool(flags)] = evaluate_tracks(records, truth)
        assert ("appearance read" in result.stderr) == bool(flags)
    assert scores[True].id_switches < scores[False].id_switches
    missing = run_cli("run", "-q", "--secondary", COLOUR_MODEL, "--appearance", tmp_path / "x.onnx")
    assert missing.returncode == 2
    assert (
        missing.stderr.startswith("vstream: error: --appearance: ") and "x.onnx" in missing.stderr
    )
    classifier = run_cli("run", "-q", "--appearance", COLOUR_MODEL)
    assert classifier.returncode == 2 and classifier.stderr.count("\n") == 1
    assert "kind embedding" in classifier.stderr


def test_detect_takes_secondary_models_as_paths_dicts_and_configs() -> None:
    results = list(
        vstream.detect(
            SAMPLE_VIDEO,
            secondary=[
                COLOUR_MODEL,
                {"name": "shape_colour", "path": str(COLOUR_MODEL), "on": {"classes": [1]}},
                SecondaryConfig(name="third", path=str(COLOUR_MODEL), on={"min_size": 10_000}),
            ],
        )
    )
    assert [r.frame_index for r in results] == list(range(len(results)))
    records = [d for r in results for d in r.to_record()["detections"]]
    assert records
    for record in records:
        read = record["attributes"]
        assert read["colour"]["label"] in LABELS and read["colour"]["fresh"]
        assert ("shape_colour" in read) == (record["class_id"] == 1)
        assert read.get("shape_colour", read["colour"]) == read["colour"]  # the same model
        assert "third" not in read  # no box is 10000 pixels wide


def test_lines_count_by_attribute_and_events_carry_the_tracks_reading(tmp_path: Path) -> None:
    # One unfiltered gate, and beside it the same gate once per colour label: each
    # filtered gate must count exactly the unfiltered gate's crossings of that colour.
    gate = "start: [320, 360], end: [320, 0]"
    lines = [f"{{name: gate, {gate}}}"] + [
        f"{{name: gate_{label}, {gate}, attributes: {{colour: [{label}]}}}}" for label in LABELS
    ]
    extra = "    analytics:\n      tracking: {}\n      lines: [" + ", ".join(lines) + "]"
    records = run_yaml(tmp_path, "reinfer_seconds: 0.5", extra)
    events = [e for r in records for e in r["events"] if e["type"] == "line_crossing"]
    unfiltered = [e for e in events if e["line"] == "gate"]
    assert len(unfiltered) >= 3, "the demo's objects cross the gate"
    assert all(e["attributes"]["colour"] in LABELS for e in unfiltered)
    for label in LABELS:
        expected = [
            (e["track_id"], e["direction"], e["pts"])
            for e in unfiltered
            if e["attributes"]["colour"] == label
        ]
        got = [
            (e["track_id"], e["direction"], e["pts"])
            for e in events
            if e["line"] == f"gate_{label}"
        ]
        assert got == expected, label
    assert len({e["attributes"]["colour"] for e in unfiltered}) > 1  # the filter chose
    final = records[-1]["lines"]
    assert sum(sum(final[f"gate_{label}"].values()) for label in LABELS) == len(unfiltered)


def test_an_attribute_filter_naming_no_classifier_or_no_label_fails_with_one_line(
    tmp_path: Path,
) -> None:
    def run(attributes: str) -> list[str]:
        zone = f"{{name: yard, points: [[0, 0], [100, 0], [100, 100]], attributes: {attributes}}}"
        colour = f"{{name: colour, path: {COLOUR_MODEL}}}"
        return refused(tmp_path, colour, f"    analytics: {{zones: [{zone}]}}")

    lines = run("{shade: [red]}")
    assert len(lines) == 1 and "attribute 'shade' must name a secondary classifier" in lines[0]
    lines = run("{colour: [red, mauve]}")
    assert len(lines) == 1 and "attribute 'colour' has no labels ['mauve']" in lines[0]
    checked = run_cli("validate", tmp_path / "pipelines.yaml")
    assert checked.returncode == 2
    assert checked.stderr.strip().splitlines() == [
        f"vstream: {tmp_path / 'pipelines.yaml'}: pipelines[0].analytics.zones[0]: 'yard': "
        "attribute 'colour' has no labels ['mauve']; the model's labels are "
        + ", ".join(LABELS_IN_ORDER)
    ]


def test_the_shipped_cascade_config_counts_warm_colours_and_keeps_ids_with_appearance(
    tmp_path: Path,
) -> None:
    shipped = Path(__file__).resolve().parents[1] / "configs" / "cascade.yaml"
    result = run_cli("run", shipped)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["frame"] for r in records] == list(range(200))
    crossings = [e for r in records for e in r["events"] if e["type"] == "line_crossing"]
    gate = [
        (e["track_id"], e["direction"], e["attributes"]["colour"])
        for e in crossings
        if e["line"] == "gate"
    ]
    warm = [
        (e["track_id"], e["direction"], e["attributes"]["colour"])
        for e in crossings
        if e["line"] == "warm_gate"
    ]
    assert gate and warm == [c for c in gate if c[2] in {"red", "orange", "yellow"}]
    assert len(warm) < len(gate)
    assert "colour read" in result.stderr and "line warm_gate:" in result.stderr
    assert "look read" in result.stderr

    # The same file without the appearance model: the demo sample's ID switches
    # (BENCHMARKS.md, "Appearance") are fewer with it.
    from vstream.evaluation_tracks import evaluate_tracks

    text = shipped.read_text()  # its vstream:// names work from any folder
    iou_only = tmp_path / "iou.yaml"
    # Gone from the secondary models too: an embedding neither tracked nor kept is refused.
    without_look = re.sub(r"\n      - name: look\b.*?kind: embedding", "", text, flags=re.S)
    iou_only.write_text(without_look.replace("appearance: look", "appearance: null"))
    plain = run_cli("run", iou_only)
    assert plain.returncode == 0, plain.stderr
    truth = json.loads(SAMPLE_VIDEO.with_name("sample_ground_truth.json").read_text())
    with_look = evaluate_tracks(records, truth)
    without = evaluate_tracks([json.loads(x) for x in plain.stdout.splitlines()], truth)
    assert with_look.id_switches < without.id_switches


def test_kept_embeddings_are_the_embedders_own_and_cost_no_second_read(tmp_path: Path) -> None:
    # configs/cascade.yaml with the embedder's vectors in the records and the detector on
    # every second frame: the tracker's appearance model is read once per detected frame,
    # and the records take those vectors (fresh), or the track's last one between detections.
    import numpy as np

    from vstream.assets import APPEARANCE_MODEL
    from vstream.cascade import SecondaryModel
    from vstream.sources.file import VideoFileSource

    shipped = Path(__file__).resolve().parents[1] / "configs" / "cascade.yaml"
    text = shipped.read_text()
    assert "uri: vstream://sample.mp4" in text
    text = text.replace(
        "uri: vstream://sample.mp4", "uri: vstream://sample.mp4\n        detect_every: 2"
    )
    runs = {}
    for keep in ("false", "true"):
        config = tmp_path / f"keep-{keep}.yaml"
        config.write_text(
            text.replace("kind: embedding", f"kind: embedding\n        keep_embedding: {keep}")
        )
        result = run_cli("run", config)
        assert result.returncode == 0, result.stderr
        runs[keep] = re.findall(r"look read (\d+) objects in (\d+) runs", result.stderr)
    # As many reads either way: one run per detected frame (100 of 200), none again for records.
    assert runs["true"] == runs["false"] and runs["true"][0][1] == "100"

    records = [json.loads(line) for line in result.stdout.splitlines()]
    embedder = SecondaryModel(
        SecondaryConfig(name="look", path=str(APPEARANCE_MODEL), kind="embedding")
    )
    last: dict[int, list[float]] = {}
    checked = 0
    for frame, record in zip(VideoFileSource(SAMPLE_VIDEO), records, strict=True):
        detections = record["detections"]
        kept = [d["attributes"]["look"] for d in detections]
        if frame.index % 2 == 0:  # detected: every vector read in this frame, by the embedder
            boxes = np.array([d["bbox"] for d in detections], np.float32).reshape(-1, 4)
            expected = embedder.run(frame, boxes).embeddings
            assert all(k["fresh"] for k in kept)
            # atol: the records round the boxes to 0.01 px and the vectors to 5 decimals
            np.testing.assert_allclose([k["embedding"] for k in kept], expected, atol=1e-3)
            checked += len(kept)
        else:  # predicted: the track's vector from its last detected frame
            assert not any(k["fresh"] for k in kept)
            tracks = [d["track_id"] for d in detections]
            assert [k["embedding"] for k in kept] == [last[t] for t in tracks]
        for k, d in zip(kept, detections, strict=True):
            if "track_id" in d:  # on a confirmed track
                last[d["track_id"]] = k["embedding"]
    assert checked > 500
