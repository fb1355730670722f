"""``vstream eval``: mAP of a run's records against ground truth."""

from __future__ import annotations

import argparse
from pathlib import Path

from vstream import assets
from vstream.cli.args import EXIT_OK, fraction
from vstream.errors import VstreamError
from vstream.evaluation import evaluate_files


def add_parser(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser("eval", help="mAP of JSON Lines detections against ground truth")
    evaluate.add_argument("records", type=Path, help="JSON Lines written by vstream run")
    evaluate.add_argument(
        "ground_truth",
        type=Path,
        nargs="?",
        default=assets.SAMPLE_GROUND_TRUTH,
        help="ground-truth JSON (default: the sample video's)",
    )
    evaluate.add_argument("--iou", type=fraction, default=0.5, help="match IoU (default 0.5)")
    evaluate.set_defaults(handler=eval_command)


def eval_command(args: argparse.Namespace) -> int:
    for path in (args.records, args.ground_truth):
        if not path.is_file():
            raise VstreamError(f"file not found: {path}")
    try:
        accuracy = evaluate_files(args.records, args.ground_truth, args.iou)
    except (ValueError, KeyError, TypeError) as exc:
        raise VstreamError(f"cannot evaluate {args.records}: malformed input ({exc})") from exc
    print(accuracy)
    return EXIT_OK
