"""``vstream eval``: mAP of a run's records against ground truth, plus tracking and line counts.

The first line is always the detection mAP. When the records carry track ids
and the ground truth carries object identities, a second line gives MOTA,
IDF1 and ID switches; when the ground truth lists line crossings, one line per
line and direction compares the run's crossing events with them. Records of
several streams are scored against the one the ground truth is of
(``--stream``, or its ``"stream"``), never mixed; a stream, frames or a frame size
the ground truth does not have are refused with one line naming them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vstream import assets
from vstream.cli.args import EXIT_OK, fraction, input_file


def add_parser(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="mAP of JSON Lines detections against ground truth; also MOTA/IDF1 and line "
        "counts when the records have tracks and events",
    )
    evaluate.add_argument("records", type=Path, help="JSON Lines written by vstream run")
    evaluate.add_argument(
        "ground_truth",
        nargs="?",
        type=input_file,
        default=assets.SAMPLE_GROUND_TRUTH,
        help="ground-truth JSON, or vstream://NAME for a bundled one (default: "
        "vstream://sample_ground_truth.json, the sample video's)",
    )
    evaluate.add_argument(
        "--iou", type=iou_threshold, default=0.5, help="match IoU, above 0 (default 0.5)"
    )
    evaluate.add_argument(
        "--stream",
        metavar="ID",
        help="the stream the ground truth is of, when the records hold several "
        "(default: the ground truth's \"stream\", else the records' only stream)",
    )
    evaluate.set_defaults(handler=eval_command)


def iou_threshold(text: str) -> float:
    """A match IoU: a fraction, but not 0. At 0 every pair of boxes, however far apart,
    would match (IoU >= 0), and a run that misses everything would score 1.000."""
    value = fraction(text)
    if value == 0.0:
        raise argparse.ArgumentTypeError(f"must be above 0 (and at most 1), got {text}")
    return value


def eval_command(args: argparse.Namespace) -> int:
    from vstream.evaluation import evaluate_files

    print("\n".join(evaluate_files(args.records, args.ground_truth, args.iou, args.stream)))
    return EXIT_OK
