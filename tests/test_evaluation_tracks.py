"""MOTA, IDF1, ID switches and line-count errors on cases small enough to count by hand."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from vstream.evaluation import evaluate
from vstream.evaluation_tracks import (
    evaluate_line_counts,
    evaluate_tracks,
    has_identities,
    has_tracks,
)

A, B, FAR = [0, 0, 10, 10], [100, 100, 110, 110], [300, 300, 310, 310]
A_SHIFTED = [2, 0, 12, 10]  # IoU with A: 80 / 120 = 0.67


def truth(*frames: list[tuple[str, list[int]]]) -> dict:
    return {
        "names": ["thing"],
        "frames": [
            {"frame": i, "boxes": [[*box, 0] for _, box in objects], "ids": [o for o, _ in objects]}
            for i, objects in enumerate(frames)
        ],
    }


def records(*frames: list[tuple[int, list[int]]]) -> list[dict]:
    return [
        {
            "frame": i,
            "detections": [
                {"bbox": box, "score": 0.9, "class_id": 0, "track_id": t} for t, box in tracks
            ],
        }
        for i, tracks in enumerate(frames)
    ]


def test_perfect_tracks() -> None:
    gt = truth([("a", A), ("b", B)], [("a", A), ("b", B)], [("a", A), ("b", B)])
    out = records([(7, A), (8, B)], [(7, A), (8, B)], [(7, A), (8, B)])
    result = evaluate_tracks(out, gt)
    assert (result.mota, result.idf1, result.id_switches) == (1.0, 1.0, 0)
    assert (result.truth_objects, result.predicted_tracks, result.mean_iou) == (2, 2, 1.0)


def test_one_id_switch() -> None:
    gt = truth(*[[("a", A)]] * 4)
    out = records([(1, A)], [(1, A)], [(2, A)], [(2, A)])
    result = evaluate_tracks(out, gt)
    assert result.id_switches == 1
    assert result.mota == pytest.approx(1 - 1 / 4)
    assert result.idf1 == pytest.approx(2 * 2 / (4 + 4))  # track 1 covers 2 of 4 frames


def test_misses_and_false_positives() -> None:
    gt = truth(*[[("a", A)]] * 4)
    out = records([(1, A)], [(1, A), (9, FAR)], [(1, A)], [])
    result = evaluate_tracks(out, gt)
    assert (result.misses, result.false_positives, result.id_switches) == (1, 1, 0)
    assert result.mota == pytest.approx(1 - 2 / 4)
    assert result.idf1 == pytest.approx(2 * 3 / (4 + 4))


def test_a_kept_correspondence_is_not_a_switch() -> None:
    # Track 2 fits better in frame 1, but track 1 still overlaps at IoU >= 0.5: kept.
    gt = truth([("a", A)], [("a", A)])
    out = records([(1, A)], [(1, A_SHIFTED), (2, A)])
    result = evaluate_tracks(out, gt)
    assert (result.id_switches, result.false_positives, result.matches) == (0, 1, 2)
    assert result.mota == pytest.approx(0.5)


def test_switch_is_counted_against_the_last_match_across_a_gap() -> None:
    gt = truth([("a", A)], [("a", A)], [("a", A)])
    out = records([(1, A)], [], [(2, A)])
    result = evaluate_tracks(out, gt)
    assert (result.id_switches, result.misses) == (1, 1)
    assert result.mota == pytest.approx(1 - 2 / 3)


def test_idf1_uses_the_best_global_pairing_not_the_greedy_one() -> None:
    # Track 1 follows a for 3 frames, then b for 2; track 2 follows a for the last 2.
    # Greedy pairs a-1 (3) and leaves b-2 (0): 3. The optimum is a-2 + b-1: 2 + 2 = 4.
    gt = truth(*[[("a", A), ("b", B)]] * 5)
    out = records([(1, A)], [(1, A)], [(1, A)], [(1, B), (2, A)], [(1, B), (2, A)])
    result = evaluate_tracks(out, gt)
    assert result.idtp == 4
    assert result.idf1 == pytest.approx(2 * 4 / (10 + 7))
    assert (result.matches, result.misses, result.id_switches) == (7, 3, 1)
    assert result.mota == pytest.approx(1 - (3 + 0 + 1) / 10)


def test_swapped_identities() -> None:
    gt = truth(*[[("a", A), ("b", B)]] * 4)
    out = records([(1, A), (2, B)], [(1, A), (2, B)], [(1, B), (2, A)], [(1, B), (2, A)])
    result = evaluate_tracks(out, gt)
    assert result.id_switches == 2
    assert result.mota == pytest.approx(1 - 2 / 8)
    assert result.idf1 == pytest.approx(2 * 4 / 16)


def test_detections_without_track_ids_are_ignored() -> None:
    gt = truth([("a", A)])
    out = [{"frame": 0, "detections": [{"bbox": A, "score": 0.9, "class_id": 0}]}]
    assert not has_tracks(out) and has_identities(gt)
    result = evaluate_tracks(out, gt)
    assert (result.misses, result.false_positives, result.mota) == (1, 0, 0.0)


def test_boxes_and_ids_must_agree() -> None:
    gt = truth([("a", A)])
    gt["frames"][0]["ids"] = []
    with pytest.raises(ValueError, match="1 boxes but 0 ids"):
        evaluate_tracks(records([(1, A)]), gt)


def test_line_count_errors() -> None:
    gt = {
        "lines": [
            {
                "name": "gate",
                "start": [0, 100],
                "end": [640, 100],
                "crossings": [
                    {"frame": 3, "id": "a", "direction": "in"},
                    {"frame": 9, "id": "b", "direction": "in"},
                    {"frame": 12, "id": "a", "direction": "out"},
                ],
            }
        ]
    }

    def crossing(line: str, direction: str) -> dict:
        return {"type": "line_crossing", "line": line, "direction": direction}

    out = [
        {"frame": 4, "detections": [], "events": [crossing("gate", "in")]},
        {"frame": 5, "detections": [], "events": [crossing("other", "in")]},
        {"frame": 13, "detections": [], "events": [crossing("gate", "out")] * 2},
    ]
    counts = evaluate_line_counts(out, gt)
    assert [(c.line, c.direction, c.predicted, c.truth, c.error) for c in counts] == [
        ("gate", "in", 1, 2, -1),
        ("gate", "out", 2, 1, 1),
    ]
    assert str(counts[0]) == "line gate in: 1 counted, 2 true (error -1)"


def test_eval_command_adds_tracking_and_counts(tmp_path: Path, capsys) -> None:
    from vstream.cli import main

    gt = truth([("a", A)], [("a", A)])
    gt["lines"] = [{"name": "gate", "start": [0, 5], "end": [20, 5], "crossings": []}]
    out = records([(3, A)], [(3, A)])
    out[1]["events"] = [{"type": "line_crossing", "line": "gate", "direction": "in"}]
    records_path, truth_path = tmp_path / "out.jsonl", tmp_path / "truth.json"
    records_path.write_text("".join(json.dumps(r) + "\n" for r in out))
    truth_path.write_text(json.dumps(gt))
    assert main(["eval", str(records_path), str(truth_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("mAP@0.5 1.000")
    assert lines[1].startswith("MOTA 1.000 IDF1 1.000 (ID switches 0,")
    assert lines[2:] == [
        "line gate in: 1 counted, 0 true (error +1)",
        "line gate out: 0 counted, 0 true (error +0)",
    ]


def two_streams() -> tuple[dict, list[dict]]:
    """Stream "cam1" tracked with one miss in ten; "cam2", empty, has the same frame numbers."""
    gt = truth(*[[("a", A)]] * 10)
    cam1 = records(*[[(1, A)]] * 9, [])
    cam2 = records(*[[]] * 10)
    for record in cam1:
        record["stream"] = "cam1"
        record["events"] = [{"type": "line_crossing", "line": "gate", "direction": "in"}]
    for record in cam2:
        record["stream"] = "cam2"
        record["events"] = [{"type": "line_crossing", "line": "gate", "direction": "out"}]
    gt["lines"] = [{"name": "gate", "start": [0, 5], "end": [20, 5], "crossings": []}]
    return gt, cam1 + cam2


def test_records_of_several_streams_are_scored_against_the_right_one() -> None:
    gt, out = two_streams()
    assert evaluate_tracks(out, gt, stream="cam1").mota == pytest.approx(0.9)
    assert evaluate_tracks(out, {**gt, "stream": "cam1"}).mota == pytest.approx(0.9)
    assert evaluate_tracks(out, gt, stream="cam2").mota == 0.0
    counts = evaluate_line_counts(out, gt, stream="cam1")
    assert [(c.direction, c.predicted) for c in counts] == [("in", 10), ("out", 0)]
    assert evaluate(out, gt, stream="cam1").mean == pytest.approx(0.9)


def test_which_stream_is_never_guessed() -> None:
    gt, out = two_streams()
    for score in (evaluate_tracks, evaluate_line_counts, evaluate):
        with pytest.raises(ValueError, match=r"2 streams \(cam1, cam2\).*--stream"):
            score(out, gt)
        with pytest.raises(ValueError, match=r"no records of stream 'cam3'.*cam1, cam2"):
            score(out, gt, stream="cam3")
    with pytest.raises(ValueError, match=r"ground truth is of stream 'cam1', not 'cam2'"):
        evaluate_tracks(out, {**gt, "stream": "cam1"}, stream="cam2")
    looped = out[:10] + [{**r, "frame": r["frame"]} for r in out[:10]]
    with pytest.raises(ValueError, match="stream 'cam1' has frame 0 more than once"):
        evaluate_tracks(looped, gt, stream="cam1")


def test_eval_command_takes_the_stream(tmp_path: Path, capsys) -> None:
    from vstream.cli import main

    gt, out = two_streams()
    records_path, truth_path = tmp_path / "out.jsonl", tmp_path / "truth.json"
    records_path.write_text("".join(json.dumps(r) + "\n" for r in out))
    truth_path.write_text(json.dumps(gt))
    assert main(["eval", str(records_path), str(truth_path), "--stream", "cam1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("MOTA 0.900 IDF1 0.947")
    assert main(["eval", str(records_path), str(truth_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "2 streams (cam1, cam2)" in error


def sample_run_records() -> list[dict]:
    """Records as ``vstream run`` writes them for the bundled sample, its truth as detections."""
    from vstream import assets

    gt = json.loads(assets.SAMPLE_GROUND_TRUTH.read_text())
    return [
        {
            "stream": "sample",
            "frame": f["frame"],
            "pts": round(f["frame"] / gt["fps"], 6),
            "width": gt["width"],
            "height": gt["height"],
            "detections": [
                {"bbox": b[:4], "score": 0.9, "class_id": b[4], "label": gt["names"][b[4]]}
                for b in f["boxes"]
            ],
        }
        for f in gt["frames"]
    ]


@pytest.mark.parametrize(
    "change, args, message",
    [
        (
            lambda r: {**r, "stream": "mine"},
            [],
            "the records are of stream 'mine', the ground truth of sample.mp4 (stream "
            "'sample'); if they are a run of that video, say so: --stream mine",
        ),
        (
            lambda r: {**r, "frame": r["frame"] + 100, "pts": r["pts"] + 4},
            [],
            "stream 'sample' has frames 200..299 (100 in all) that the ground truth does not "
            "have: it has frames 0..199",
        ),
        (
            lambda r: {**r, "width": 1280, "height": 720},
            [],
            "stream 'sample' has 1280x720 frames, the ground truth's are 640x360",
        ),
        (  # --start 2: frames numbered from 0 again, at 2 s on
            lambda r: {**r, "pts": r["pts"] + 2},
            ["vstream://sample_ground_truth.json"],
            "stream 'sample' has frame 0 at 2 s, the ground truth's frame 0 is at 0 s: score "
            "a run of every frame from the start (no --start or --stride)",
        ),
    ],
    ids=["foreign stream", "frames beyond", "frame size", "late start"],
)
def test_eval_refuses_what_the_ground_truth_does_not_have(
    tmp_path: Path, capsys, change, args: list[str], message: str
) -> None:
    from vstream.cli import main

    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(change(r)) + "\n" for r in sample_run_records()))
    assert main(["eval", str(path), *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"vstream: error: cannot evaluate {path}: {message}"]
    assert captured.out == ""


def test_eval_scores_a_run_of_the_sample_and_a_stream_named_for_it(tmp_path: Path, capsys) -> None:
    from vstream.cli import main

    path = tmp_path / "sample.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in sample_run_records()))
    assert main(["eval", str(path), "vstream://sample_ground_truth.json"]) == 0
    assert capsys.readouterr().out.startswith("mAP@0.5 1.000")
    renamed = tmp_path / "entrance.jsonl"
    renamed.write_text(
        "".join(json.dumps({**r, "stream": "entrance"}) + "\n" for r in sample_run_records())
    )
    assert main(["eval", str(renamed), "--stream", "entrance"]) == 0
    assert capsys.readouterr().out.startswith("mAP@0.5 1.000")


def sample_truth() -> dict:
    from vstream import assets

    return json.loads(assets.SAMPLE_GROUND_TRUTH.read_text())


def bad_bbox(lines: list[str]) -> list[str]:
    record = json.loads(lines[3])
    record["detections"][0]["bbox"][3] = float("nan")
    return [*lines[:3], json.dumps(record), *lines[4:]]  # json writes NaN, as Python reads it


def _without_ids(gt: dict) -> dict:
    del gt["frames"][7]["ids"]
    return gt


def _unnamed_class(gt: dict) -> dict:
    gt["frames"][3]["boxes"][1][4] = 9
    return gt


def _frame_twice(gt: dict) -> dict:
    gt["frames"].append({**gt["frames"][0], "boxes": [], "ids": []})
    return gt


def _id_twice(gt: dict) -> dict:
    gt["frames"][3]["ids"][1] = gt["frames"][3]["ids"][0]
    return gt


def _inverted_box(gt: dict) -> dict:
    gt["frames"][3]["boxes"][1] = [310, 78, 251, 140, 2]
    return gt


def _change_detections(
    change: Callable[[list[dict]], None],
) -> Callable[[list[str]], list[str]]:
    """The record on line 4 (frame 3, of 5 detections) with ``change`` made to its detections."""

    def lines(ls: list[str]) -> list[str]:
        record = json.loads(ls[3])
        change(record["detections"])
        return [*ls[:3], json.dumps(record), *ls[4:]]

    return lines


def _track_twice(detections: list[dict]) -> None:
    detections[0]["track_id"] = detections[2]["track_id"] = 5


def _inverted_bbox(detections: list[dict]) -> None:
    detections[1]["bbox"] = [251, 140, 310, 78]


@pytest.mark.parametrize(
    ("lines", "truth_change", "message"),
    [
        (
            lambda ls: [*ls[:1], "[1, 2]", *ls[1:]],
            None,
            "{records}: line 2: Input should be an object",
        ),
        (
            lambda ls: [ls[0].replace('"frame": 0', '"frame": 1e400')],
            None,
            "{records}: line 1: frame: Input should be a valid integer",
        ),
        (
            bad_bbox,
            None,
            "{records}: line 4: detections[0].bbox[3]: Input should be a finite number",
        ),
        (
            lambda ls: [ls[0][:40]],
            None,
            "{records}: line 1: Invalid JSON: EOF while parsing",
        ),
        (
            None,
            _without_ids,
            "against {truth}: frames[7]: no ids, where other frames give them",
        ),
        (None, _unnamed_class, "against {truth}: frames[3].boxes[1]: class 9, of 4 names"),
        (None, lambda gt: gt["frames"], "against {truth}: Input should be an object"),
        (None, _frame_twice, "against {truth}: frames[200]: frame 0 again (frames[0] has it)"),
        (None, _id_twice, "against {truth}: frames[3]: ids[1]: id 1 again (ids[0] has it)"),
        (
            _change_detections(_track_twice),
            None,
            "{records}: line 4: detections[2]: track_id 5 again (detections[0] has it)",
        ),
        (
            None,
            _inverted_box,
            "against {truth}: frames[3].boxes[1]: box [310.0, 78.0, 251.0, 140.0, 2] has "
            "x2 <= x1 or y2 <= y1 (x1, y1, x2, y2, class_id expected)",
        ),
        (
            _change_detections(_inverted_bbox),
            None,
            "{records}: line 4: detections[1].bbox: bbox [251.0, 140.0, 310.0, 78.0] has "
            "x2 < x1 or y2 < y1 (x1, y1, x2, y2 expected)",
        ),
    ],
    ids=[
        *("a list", "frame 1e400", "NaN bbox", "cut line", "ids missing", "class unnamed"),
        *("list", "frame twice", "id twice", "track twice", "inverted box", "inverted bbox"),
    ],
)
def test_eval_says_which_line_and_key_of_a_malformed_file_is_wrong(
    tmp_path: Path, capsys, lines, truth_change, message: str
) -> None:
    """A record that was a list, or a frame of 1e400, was an internal error (exit 1, a Python
    message); a ground truth box of a class it has no name for, too. A frame listed twice, an
    id or a track id twice in a frame, or an inverted box were scored (one entry of a frame
    dropped, IDF1 above 1, an object no box can match): refused, as ambiguous."""
    from vstream.cli import main

    records = [json.dumps(r) for r in sample_run_records()]
    records_path, truth_path = tmp_path / "run.jsonl", tmp_path / "truth.json"
    records_path.write_text("\n".join(lines(records) if lines else records) + "\n")
    gt = sample_truth()
    truth_path.write_text(json.dumps(truth_change(gt) if truth_change else gt))
    assert main(["eval", str(records_path), str(truth_path)]) == 2
    captured = capsys.readouterr()
    shown = message.format(records=records_path, truth=truth_path)
    [line] = captured.err.splitlines()
    assert line.startswith(f"vstream: error: cannot evaluate {shown}"), line
    assert captured.out == ""


def test_eval_says_a_run_of_part_of_the_video_leaves_the_rest_missed(
    tmp_path: Path, capsys
) -> None:
    from vstream.cli import main

    path = tmp_path / "sample.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in sample_run_records()[:5]))
    assert main(["eval", str(path), "vstream://sample_ground_truth.json"]) == 0
    report = capsys.readouterr().out.splitlines()
    assert report[1] == (
        "the records have 5 of the ground truth's 200 frames: the objects of the other 195 "
        "count as missed (score a run of the whole video)"
    )


def write_files(tmp_path: Path, out: list[dict], gt: dict) -> tuple[Path, Path]:
    """``out`` as JSON Lines and ``gt`` as JSON, for ``vstream eval``."""
    records_path, truth_path = tmp_path / "out.jsonl", tmp_path / "truth.json"
    records_path.write_text("".join(json.dumps(r) + "\n" for r in out))
    truth_path.write_text(json.dumps(gt))
    return records_path, truth_path


def test_frames_the_ground_truth_does_not_list_are_scored_by_neither_metric(
    tmp_path: Path, capsys
) -> None:
    """A ground truth of frames 0, 5 and 10 (5 listed with no objects), a run of every frame
    with track 5 exactly on the object. Frames 1-4 and 6-9 may be ones nobody annotated: their
    detections are no false positives, in mAP (which counted 8 of them) as in tracking. The one
    on frame 5, listed as empty, is: ranked first (score 0.95), it gives precision 1/2 at
    recall 1/2 and 2/3 at recall 1, so AP = 2/3 (envelope 2/3 throughout); MOTA = 1 - 1/2."""
    from vstream.cli import main

    gt = truth([("a", A)], [], [("a", A)])
    for entry, frame in zip(gt["frames"], (0, 5, 10), strict=True):
        entry["frame"] = frame
    out = records(*[[(5, A)]] * 11)
    out[5]["detections"][0]["score"] = 0.95
    assert evaluate(out, gt).mean == pytest.approx(2 / 3)
    result = evaluate_tracks(out, gt)
    assert (result.false_positives, result.predicted_boxes, result.mota) == (1, 3, 0.5)

    assert main(["eval", *map(str, write_files(tmp_path, out, gt))]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == [
        "mAP@0.5 0.667 (thing 0.667)",
        "8 of the records' 11 frames are not in the ground truth and are not scored (a frame "
        'with no objects is listed with "boxes": [])',
    ]


def test_ids_null_are_no_identities(tmp_path: Path, capsys) -> None:
    """``"ids": null`` passes the schema as no ids (as a frame without the key); scoring
    tracks against it was a TypeError (exit 1)."""
    from vstream.cli import main

    gt = truth([("a", A)])
    gt["frames"][0]["ids"] = None
    out = records([(1, A)])
    assert not has_identities(gt)
    with pytest.raises(ValueError, match="1 boxes but 0 ids"):
        evaluate_tracks(out, gt)
    assert main(["eval", *map(str, write_files(tmp_path, out, gt))]) == 0
    assert capsys.readouterr().out.splitlines() == ["mAP@0.5 1.000 (thing 1.000)"]


def test_a_record_with_pts_null_is_not_timed(tmp_path: Path, capsys) -> None:
    """``"pts": null`` passes the schema; checked against the ground truth's fps it was a
    TypeError (exit 1). With no time stamp, there is nothing to check."""
    from vstream.cli import main

    gt = {**truth([("a", A)]), "fps": 25}
    out = [{**records([(1, A)])[0], "pts": None}]
    assert main(["eval", *map(str, write_files(tmp_path, out, gt))]) == 0
    assert capsys.readouterr().out.startswith("mAP@0.5 1.000")


def test_a_track_id_of_minus_1_is_a_track_like_any_other() -> None:
    """-1 was the "never matched" mark of a truth object: a track -1 was kept as every new
    object's match. Here truth a is A, b is B (IoU(A, B) = 60/140 = 0.43); track -1 at
    [2, 0, 12, 10] overlaps both at 80/120 = 0.67, track 5 is A (IoU 1 with a, 0.43 with b).
    The only pairing of both at IoU >= 0.5 is a-5, b-(-1): 2 matches, MOTA 1, as
    py-motmetrics gives. Kept, a-(-1) left b only track 5 at 0.43: a miss and a false
    positive, MOTA 0."""
    gt = truth([("a", A), ("b", [4, 0, 14, 10])])
    scores = {
        track: evaluate_tracks(records([(track, [2, 0, 12, 10]), (5, A)]), gt) for track in (-1, 7)
    }
    for result in scores.values():
        assert (result.matches, result.misses, result.false_positives) == (2, 0, 0)
        assert result.mota == 1.0
    assert scores[-1] == scores[7]


def test_eval_refuses_an_iou_of_0(tmp_path: Path, capsys) -> None:
    """At IoU 0 every pair of boxes matched: a run with its one box far from the object's
    scored mAP 1.000 and MOTA 1.000."""
    from vstream.cli import main

    paths = [*map(str, write_files(tmp_path, records([(1, FAR)]), truth([("a", A)])))]
    with pytest.raises(SystemExit) as exit_:
        main(["eval", *paths, "--iou", "0"])
    assert exit_.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "argument --iou: must be above 0 (and at most 1), got 0" in line
    assert main(["eval", *paths, "--iou", "1"]) == 0
    assert capsys.readouterr().out.startswith("mAP@1 0.000")


def test_eval_reads_files_with_a_byte_order_mark(tmp_path: Path, capsys) -> None:
    """A file saved with a UTF-8 byte-order mark (as Notepad does) was invalid JSON."""
    from vstream.cli import main

    records_path, truth_path = tmp_path / "run.jsonl", tmp_path / "truth.json"
    lines = "".join(json.dumps(r) + "\n" for r in sample_run_records())
    records_path.write_text(lines, encoding="utf-8-sig")
    truth_path.write_text(json.dumps(sample_truth()), encoding="utf-8-sig")
    assert main(["eval", str(records_path), str(truth_path)]) == 0
    assert capsys.readouterr().out.startswith("mAP@0.5 1.000")


def test_records_that_name_no_stream_are_said_so() -> None:
    """They were "the records hold None"."""
    gt = {**truth([("a", A)]), "stream": "cam"}
    out = records([(1, A)])
    with pytest.raises(
        ValueError,
        match=r"no records of stream 'cam'; the records name no stream \(a run of one source\): "
        r'to score them, name none \(no --stream, no "stream" in the ground truth\)$',
    ):
        evaluate(out, gt)
    mixed = [*out, {**out[0], "stream": "cam1"}]
    with pytest.raises(ValueError, match=r"2 streams \(\(no stream id\), cam1\)"):
        evaluate_tracks(mixed, {**gt, "stream": None})
    with pytest.raises(ValueError, match=r"the records hold \(no stream id\), cam1$"):
        evaluate_tracks(mixed, gt, stream="cam")


def test_eval_takes_a_box_clipped_to_nothing(tmp_path: Path, capsys) -> None:
    """``vstream run`` clips boxes to the frame, so one past its edge is written with x2 == x1:
    a false positive, not malformed (an inverted one, x2 < x1, is refused)."""
    from vstream.cli import main

    out = records([(1, A), (2, [640, 0, 640, 10])])
    assert main(["eval", *map(str, write_files(tmp_path, out, truth([("a", A)])))]) == 0
    assert "false positives 1," in capsys.readouterr().out
