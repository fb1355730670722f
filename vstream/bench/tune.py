"""``vstream bench --tune``: the few plausible plans, measured end to end, the best as config.

The automatic plan (:mod:`vstream.inference.plan`) is a rule; the user's
machine, model and video decide. Tuning runs the real pipeline (decoding,
preprocessing, the model, postprocessing, the streams asked for) with each
plausible plan for the same share of a time budget and prints the fastest as
the ``runtime:``/``model:`` settings to paste into a pipelines file.

Plausible plans: on a CPU the cores split between concurrent runs and ONNX
Runtime threads per run (1 x all cores ... all cores x 1), each with batches
of 1 and 4 frames; on CUDA one run (one session runs one batch at a time
there: the plan's rule) with batches of 8, 16 and 32, the default plan's
batch (:data:`~vstream.inference.model.CUDA_BATCH`) among them, each with
torch's letterbox and with the one-launch kernel (``runtime.letterbox_kernel``;
a plan whose detector cannot be built here, e.g. the kernel without
cuda-bindings, is left out and said why). A model that fixes its batch is
tuned at that batch only.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vstream.bench.stages import looped_source
from vstream.config.base import flag
from vstream.config.model import MAX_RUNS, ModelConfig, PostprocessOptions, RuntimeOptions
from vstream.detector import Detector
from vstream.engine.pipeline import detect_iter
from vstream.errors import ModelError, first_line
from vstream.inference.model import CUDA_BATCH

WARMUP_FRAMES = 8
"""Results per stream taken before timing: session warm-up and the first key frame."""

MIN_SECONDS = 1.0
"""Shortest measurement of one plan in one round, however small the budget."""

ROUNDS = 2


@dataclass(frozen=True)
class Plan:
    """One way of running the model: runs at once, threads per run, frames per batch."""

    concurrent_runs: int
    threads_per_run: int
    """0: ONNX Runtime's default (the GPU plans)."""
    batch_size: int | None
    """None: the batch the model fixes."""
    letterbox_kernel: bool = False
    """The one-launch CUDA letterbox (the GPU plans try both)."""

    def describe(self) -> str:
        threads = self.threads_per_run or "default"
        batch = self.batch_size or "fixed"
        kernel = ", letterbox kernel" if self.letterbox_kernel else ""
        return f"{self.concurrent_runs} x {threads} threads, batch {batch}{kernel}"


def plausible_plans(device: str, cores: int, fixed_batch: int | None) -> list[Plan]:
    """The plans worth measuring for ``device`` with ``cores`` cores."""
    batches: Sequence[int | None] = (
        [None] if fixed_batch is not None else ([1, 4] if device == "cpu" else [8, 16, CUDA_BATCH])
    )
    if device == "cpu":
        runs = sorted({r for r in (1, 2, cores // 2, cores) if 1 <= r <= min(cores, MAX_RUNS)})
        splits = [(r, max(1, cores // r)) for r in runs]
        return [Plan(r, t, b) for (r, t), b in itertools.product(splits, batches)]
    return [Plan(1, 0, b, kernel) for b, kernel in itertools.product(batches, (False, True))]


def detector_for(
    plan: Plan, model: ModelConfig, postprocess: PostprocessOptions, runtime: RuntimeOptions
) -> Detector:
    """The detector ``plan`` makes of the user's model and settings."""
    return Detector.from_config(
        model.model_copy(update={"intra_op_threads": plan.threads_per_run}),
        postprocess,
        runtime.model_copy(
            update={
                "concurrent_runs": plan.concurrent_runs,
                "batch_size": plan.batch_size,
                "in_flight": None,
                "letterbox_kernel": plan.letterbox_kernel,
            }
        ),
    )


def measure_fps(
    detector: Detector, video: Path, streams: int, seconds: float, decoder_threads: int = 0
) -> float:
    """Frames per second of the whole pipeline over ``seconds`` of steady state, each stream
    decoded with ``decoder_threads`` (``--decoder-threads``; 0: FFmpeg's choice)."""
    sources = [
        looped_source(video, detector.device, f"s{i}", decoder_threads) for i in range(streams)
    ]
    results = detect_iter(detector, sources)
    try:
        for _ in itertools.islice(results, WARMUP_FRAMES * streams):
            pass
        frames = 0
        started = time.perf_counter()
        for _ in results:
            frames += 1
            if time.perf_counter() - started >= seconds:
                break
        elapsed = time.perf_counter() - started
    finally:
        results.close()  # leaving early stops every thread of the pipeline
        for source in sources:
            source.close()
    return frames / elapsed if elapsed > 0 else 0.0


def tune(
    model: ModelConfig,
    postprocess: PostprocessOptions,
    runtime: RuntimeOptions,
    video: Path,
    *,
    streams: int,
    budget_seconds: float,
    device: str,
    cores: int,
    fixed_batch: int | None,
    decoder_threads: int = 0,
) -> dict[str, Any]:
    """Every plausible plan measured for an equal share of ``budget_seconds``; the best marked.

    The streams are decoded as the pipeline would decode them (``decoder_threads``), so
    the plans share the cores with decoding as they will.

    The plans are measured in :data:`ROUNDS` rounds, the second in reverse
    order, and each keeps its best round: a neighbour's burst of work then
    has to hit the same plan twice to hide what it can do.
    """
    detectors: dict[Plan, Detector] = {}
    left_out: list[str] = []
    for plan in plausible_plans(device, cores, fixed_batch):
        try:
            detectors[plan] = detector_for(plan, model, postprocess, runtime)
        except ModelError as exc:  # this plan cannot run here (the others still can)
            left_out.append(f"{plan.describe()}: {first_line(exc)}")
    plans = list(detectors)
    if not plans:
        raise ModelError(f"no plan could be built: {'; '.join(left_out)}")
    share = max(MIN_SECONDS, budget_seconds / (len(plans) * ROUNDS))
    rounds: dict[Plan, list[float]] = {plan: [] for plan in plans}
    for round_ in range(ROUNDS):
        for plan in plans if round_ % 2 == 0 else plans[::-1]:
            rounds[plan].append(
                measure_fps(detectors[plan], video, streams, share, decoder_threads)
            )
    measured = [
        {
            "concurrent_runs": plan.concurrent_runs,
            "threads_per_run": plan.threads_per_run,
            "batch_size": detectors[plan].batch_size,
            "letterbox_kernel": plan.letterbox_kernel,
            "fps": round(max(rounds[plan]), 2),
            "fps_per_round": [round(f, 2) for f in rounds[plan]],
        }
        for plan in plans
    ]
    best = max(measured, key=lambda m: m["fps"])
    runtime_settings: dict[str, Any] = {"concurrent_runs": best["concurrent_runs"]}
    if fixed_batch is None:
        runtime_settings["batch_size"] = best["batch_size"]
    if device != "cpu":
        runtime_settings["letterbox_kernel"] = best["letterbox_kernel"]
    model_settings = {"intra_op_threads": best["threads_per_run"]}
    return {
        "device": device,
        "cores": cores,
        "streams": streams,
        "seconds_per_plan": round(share * ROUNDS, 1),
        "plans": measured,
        "left_out": left_out,
        "best": best,
        "config": {"runtime": runtime_settings, "model": model_settings},
    }


def render_tuning(found: dict[str, Any], video: Path) -> str:
    """The measurements as YAML comments, then the best plan as settings to paste."""
    on_gpu = found["device"] != "cpu"
    lines = [
        f"# vstream bench --tune: {len(found['plans'])} plans, {found['streams']} stream(s) of "
        f"{video.name}, {found['seconds_per_plan']} s each, {found['cores']} cores "
        f"({found['device']})",
        "#   runs x threads   batch      fps" + ("   letterbox" if on_gpu else ""),
    ]
    for plan in found["plans"]:
        threads = plan["threads_per_run"] or "default"
        kind = "kernel" if plan["letterbox_kernel"] else "torch"
        letterbox = f"   {kind:<9}" if on_gpu else ""
        mark = "   <- best" if plan is found["best"] else ""
        lines.append(
            f"#   {plan['concurrent_runs']:>4} x {threads!s:<8}{plan['batch_size']:>6}"
            f"{plan['fps']:>9.1f}{letterbox}{mark}".rstrip()
        )
    lines += [f"#   left out: {reason}" for reason in found["left_out"]]
    runtime, model = found["config"]["runtime"], found["config"]["model"]
    given = [_given(flag(RuntimeOptions, k), v) for k, v in runtime.items()]
    given += [_given(flag(ModelConfig, k), v) for k, v in model.items()]
    lines.append(f"# merge into the pipeline's sections, or run with: {' '.join(given)}")
    for section, settings in (("runtime", runtime), ("model", model)):
        lines.append(f"{section}:")
        lines += [f"  {key}: {_yaml(value)}" for key, value in settings.items()]
    return "\n".join(lines)


def _given(option: str, value: Any) -> str:
    """A setting as its command-line flag: a yes/no one on its own (``--no-...`` for no)."""
    if isinstance(value, bool):
        return option if value else f"--no-{option.removeprefix('--')}"
    return f"{option} {value}"


def _yaml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
