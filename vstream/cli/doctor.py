"""``vstream doctor``: the environment, and proof that the zero-copy path works on this machine.

Imports nothing heavy until it runs: ``vstream --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vstream.cli.args import input_file, positive

MAX_FRAMES = 10_000


def add_parser(commands: argparse._SubParsersAction) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check the environment and prove the GPU path (zero-copy, correctness, fps)",
        description="Report drivers, CUDA, torch, ONNX Runtime, PyNvVideoCodec and NVDEC/NVENC, "
        "then run checks (pass, fail, or skip with a reason), each on evidence from ONNX "
        "Runtime, torch's CUDA allocator or the profiler: the ORT provider and its stream, "
        "ORT computing on the letterbox's tensor, no frame-sized copies, NVDEC detections "
        "matching the CPU path, CUDA graphs, frames per second. Exit status 0 when every "
        "check that ran passed, 1 when one failed.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="also write the JSON report to FILE (attach it to an issue)",
    )
    doctor.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto: GPU checks where a GPU works, skipped otherwise; cuda: they must run "
        "(fail without a GPU); cpu: skip them",
    )
    import typing

    from vstream.config.model import Provider  # loaded already, by the run command's flags

    doctor.add_argument(
        "--provider",
        choices=typing.get_args(Provider),
        default="auto",
        help="ONNX Runtime's provider for the GPU checks (runtime.provider): tensorrt proves "
        "and times TensorRT, and measures its fp16 detections against the reference "
        "(the first run builds the engine: minutes)",
    )
    doctor.add_argument(
        "--model",
        type=input_file,
        help="ONNX detector or vstream://NAME (default: the bundled demo)",
    )
    doctor.add_argument(
        "--video",
        type=input_file,
        help="video file or vstream://NAME (default: the bundled sample)",
    )
    doctor.add_argument(
        "--frames",
        type=frames,
        default=120,
        help=f"frames per measurement, 1 to {MAX_FRAMES} (default: 120)",
    )
    doctor.add_argument(
        "--quick",
        action="store_true",
        help="environment, providers, NVDEC and zero-copy only",
    )
    doctor.set_defaults(handler=doctor_command)


def frames(text: str) -> int:
    value = positive(text)
    if value > MAX_FRAMES:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_FRAMES}, got {text}")
    return value


def _check_paths(args: argparse.Namespace) -> None:
    """Bad paths are one line before anything runs, not a failed check or a lost report."""
    from vstream.errors import VstreamError

    for flag, path in (("--model", args.model), ("--video", args.video)):
        if path is not None and not path.is_file():
            if ":/" in str(path):  # a URL, its credentials too: not said back
                raise VstreamError(f"{flag} takes a file, not a URL")
            raise VstreamError(f"{flag} {path}: no such file")
    if args.report is not None and not args.report.resolve().parent.is_dir():
        raise VstreamError(f"--report {args.report}: its folder does not exist")


def doctor_command(args: argparse.Namespace) -> int:
    _check_paths(args)
    from vstream.doctor.runner import DoctorOptions, quiet_logs, run_doctor

    options = DoctorOptions(
        device=args.device, frames=args.frames, quick=args.quick, provider=args.provider
    )
    if args.model is not None:
        options = DoctorOptions(**{**options.__dict__, "model": args.model})
    if args.video is not None:
        options = DoctorOptions(**{**options.__dict__, "video": args.video})

    def progress(name: str) -> None:
        print(f"vstream doctor: {name}", file=sys.stderr, flush=True)

    with quiet_logs():
        report = run_doctor(options, progress=progress)
    document = json.dumps(report.to_dict(), indent=2)
    print(document if args.json else report.table())
    if args.report is not None:
        try:
            args.report.write_text(document + "\n")
        except OSError as exc:  # printed above already: nothing is lost
            from vstream.errors import VstreamError

            raise VstreamError(f"--report {args.report}: cannot write: {exc.strerror}") from exc
    return report.exit_code
