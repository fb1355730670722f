"""``vstream validate``: every check ``serve`` runs before it starts streams, with lines.

Checked here: the YAML, every key and value against the config models
(types, bounds, unknown keys), that the API is not exposed without a token
(what ``serve`` refuses), that model and video files exist, that sink
files can be written, that every model loads in ONNX Runtime and fits its
``imgsz``, batch size (the device's, for its IO budget), ``dtype``, ``format``,
``scores`` and ``class_names`` (:func:`~vstream.postprocess.fit.fit_model`, as the
detector reads it; a secondary model: its input is an image, its outputs
match its labels, the classes of its ``on`` are the detector's), that the
classes of the lines and zones are the model's, and that Ray
is installed when the config asks for a cluster or for worker processes
(found, not imported). Left to run time, because they need the network or the
device: reaching cameras and brokers, and CUDA itself.

Imports neither torch nor PyAV: it answers in a fraction of a second.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vstream.cli.args import EXIT_BAD_INPUT, EXIT_OK
from vstream.cluster.connect import ray_installed, ray_missing
from vstream.config import ConfigError, load_config
from vstream.config.analytics import AnalyticsConfig, unknown_classes
from vstream.config.model import absent_classes, describe_classes
from vstream.errors import VstreamError


def add_parser(commands: argparse._SubParsersAction) -> None:
    validate = commands.add_parser(
        "validate",
        help="check a pipelines file",
        description="Check a pipelines file as vstream serve would before starting: types, "
        "bounds, unknown keys, files that must exist or be writable, and that each model "
        "loads and fits its settings. Every problem is reported as FILE:LINE: KEY.PATH: "
        "MESSAGE; the exit status is 2 if there is any.",
    )
    validate.add_argument("config", type=Path, help="pipelines file (YAML)")
    validate.set_defaults(handler=validate_command)


def _filter_problems(
    where: str, analytics: AnalyticsConfig, labels: dict[str, tuple[str, ...]]
) -> list[str]:
    """The lines' and zones' ``attributes`` filters naming labels their classifier lacks."""
    from vstream.config.secondary import check_filter_labels

    problems = []
    for section, places in (("lines", analytics.lines), ("zones", analytics.zones)):
        for k, place in enumerate(places):
            for name, wanted in (place.attributes or {}).items():
                if name not in labels:
                    continue  # its model's own problem is reported already
                try:
                    check_filter_labels(f"{place.name!r}", name, wanted, labels[name])
                except VstreamError as exc:
                    problems.append(f"{where}.{section}[{k}]: {exc}")
    return problems


def _sized_for(device: str) -> str:
    """The device a model's batch is sized for, without torch: ``cuda`` where asked for, or
    for ``auto`` where ONNX Runtime has a GPU provider (a run there takes the GPU's batch of
    32 unless told; a run that finds no GPU falls back to the CPU's, well within)."""
    if device.startswith("cuda"):
        return "cuda"
    if device == "auto":
        from vstream.inference.wheels import has_gpu_provider, load_onnxruntime

        return "cuda" if has_gpu_provider(load_onnxruntime().get_available_providers()) else "cpu"
    return "cpu"


def validate_command(args: argparse.Namespace) -> int:
    from vstream.analytics.shapes import keypoint_indices
    from vstream.config.secondary import check_on_classes
    from vstream.inference.model import check_model
    from vstream.inference.secondary_spec import check_secondary
    from vstream.postprocess.fit import fit_model

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        for line in exc.lines():
            print(f"vstream: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    problems = []
    if (exposure := config.server.exposure_problem()) is not None:
        problems.append(f"{args.config}: {exposure}")
    if not ray_installed():
        if config.cluster is not None:
            problems.append(f"{args.config}: cluster: {ray_missing()}")
        elif config.processes not in (1, "auto"):  # auto means 1 without Ray
            problems.append(
                f"{args.config}: processes: {ray_missing(f'processes {config.processes}')}"
            )
    for i, pipeline in enumerate(config.pipelines):
        names = pipeline.model.names()
        try:
            checked = check_model(
                pipeline.model.path,
                pipeline.model.imgsz,
                pipeline.runtime.batch_size,
                pipeline.model.max_io_mib,
                _sized_for(pipeline.runtime.device),
            )
            fit = fit_model(checked.spec, pipeline.model, checked.input_size, checked.output_shapes)
            names = fit.class_names
        except VstreamError as exc:
            problems.append(f"{args.config}: pipelines[{i}].model: {exc}")
        else:
            try:
                keypoint_indices(pipeline.analytics.anchor_keypoints, fit.keypoint_names)
            except ValueError as exc:
                problems.append(f"{args.config}: pipelines[{i}].{exc}")
        if absent := absent_classes(pipeline.postprocess.classes or (), names or []):
            problems.append(
                f"{args.config}: pipelines[{i}].postprocess.classes: {absent} are not classes "
                f"of the model, which has {describe_classes(names or [])}"
            )
        labels: dict[str, tuple[str, ...]] = {}
        for j, secondary in enumerate(pipeline.secondary):
            try:
                labels[secondary.name] = check_secondary(secondary).labels
                check_on_classes(secondary, names or [])
            except VstreamError as exc:
                problems.append(f"{args.config}: pipelines[{i}].secondary[{j}]: {exc}")
        where = f"{args.config}: pipelines[{i}].analytics"
        problems += _filter_problems(where, pipeline.analytics, labels)
        for place, problem in unknown_classes(pipeline.analytics, names or []):
            problems.append(f"{where}.{place}: {problem}")
    for line in problems:
        print(f"vstream: {line}", file=sys.stderr)
    if problems:
        return EXIT_BAD_INPUT
    sources = sum(len(p.sources) for p in config.pipelines)
    sinks = sum(len(p.sinks) for p in config.pipelines)
    print(
        f"{args.config}: OK: {len(config.pipelines)} pipeline(s), {sources} source(s), "
        f"{sinks} sink(s)"
    )
    return EXIT_OK
