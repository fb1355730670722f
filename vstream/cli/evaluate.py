"""``vstream eval``: mAP of a run's records against ground truth, plus tracking and line counts.

The first line is always the detection mAP. When the records carry track ids
and the ground truth carries object identities, a second line gives MOTA,
IDF1 and ID switches; when the ground truth lists line crossings, one line per
line and direction compares the run's crossing events with them. Records of
several streams are scored against the one the ground truth is of
(``--stream``, or its ``"stream"``), never mixed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from vstream import assets
from vstream.cli.args import EXIT_OK, fraction
from vstream.errors import VstreamError


def add_parser(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="mAP of JSON Lines detections against ground truth; also MOTA/IDF1 and line "
        "counts when the records have tracks and events",
    )
    evaluate.add_argument("records", type=Path, help="JSON Lines written by vstream run")
    evaluate.add_argument(
        "ground_truth",
        type=Path,
        nargs="?",
        default=assets.SAMPLE_GROUND_TRUTH,
        help="ground-truth JSON (default: the sample video's)",
    )
    evaluate.add_argument("--iou", type=fraction, default=0.5, help="match IoU (default 0.5)")
    evaluate.add_argument(
        "--stream",
        metavar="ID",
        help="the stream the ground truth is of, when the records hold several "
        "(default: the ground truth's \"stream\", else the records' only stream)",
    )
    evaluate.set_defaults(handler=eval_command)


def _load(records_path: Path, ground_truth_path: Path) -> tuple[list[dict[str, Any]], Any]:
    with records_path.open(encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    return records, json.loads(ground_truth_path.read_text(encoding="utf-8"))


def eval_command(args: argparse.Namespace) -> int:
    from vstream.evaluation import evaluate
    from vstream.evaluation_tracks import (
        evaluate_line_counts,
        evaluate_tracks,
        has_identities,
        has_tracks,
        select_stream,
    )

    for path in (args.records, args.ground_truth):
        if not path.is_file():
            raise VstreamError(f"file not found: {path}")
    try:
        records, ground_truth = _load(args.records, args.ground_truth)
    except (ValueError, KeyError, TypeError) as exc:
        raise VstreamError(f"cannot evaluate {args.records}: malformed input ({exc})") from exc
    try:
        records = select_stream(records, ground_truth, args.stream)
    except ValueError as exc:  # which stream: said in the message, not malformed input
        raise VstreamError(f"cannot evaluate {args.records}: {exc}") from None
    except (KeyError, TypeError) as exc:
        raise VstreamError(f"cannot evaluate {args.records}: malformed input ({exc})") from exc
    try:
        report = [str(evaluate(records, ground_truth, args.iou))]
        if has_identities(ground_truth) and has_tracks(records):
            report.append(str(evaluate_tracks(records, ground_truth, args.iou)))
        if ground_truth.get("lines"):
            if not any("events" in record for record in records):
                report.append("line counts: the records have no events (run with --line)")
            else:
                report.extend(str(count) for count in evaluate_line_counts(records, ground_truth))
    except (ValueError, KeyError, TypeError) as exc:
        raise VstreamError(f"cannot evaluate {args.records}: malformed input ({exc})") from exc
    print("\n".join(report))
    return EXIT_OK
