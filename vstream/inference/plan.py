"""How a pipeline's model runs: how many runs at once, how many threads each, how many buffers.

On a CPU, ONNX Runtime gets more out of a detector-sized model from several
runs in flight with one thread each than from one run spread over every
core: the threads of one run meet at the end of every operator and wait for
the slowest, while separate runs never wait for each other (on the project's
2-core machine, two runs of one thread did about 1.45x the inferences of one
run of two threads). So by default a CPU pipeline runs as many model runs at
once as there are cores (at most :data:`MAX_AUTO_RUNS`), with the cores
divided among them: one thread each up to 8 cores. Decoding and the other
stages share the same cores; ONNX Runtime's threads do not spin by default
(``model.spin_wait``), so they yield to them.

On CUDA it is always one run: the GPU already runs a model's kernels in
parallel, and ONNX Runtime's CUDA provider has one compute stream per
session, so runs of one session cannot overlap there. A
``runtime.concurrent_runs`` above 1 on CUDA is said once, here, and run as
1. This plan is the one place the number of runs is decided: the session,
the detector and the stages take it as it is.

What the user sets always wins: ``runtime.concurrent_runs``
(``--concurrent-runs``) and ``model.intra_op_threads`` (``--threads``); the
other is derived from the cores. Each run in flight needs a batch buffer of
its own, plus one being gathered and one in postprocessing, so the buffers
(``runtime.in_flight``) default to runs + 2; a smaller ``in_flight`` given
alone lowers the automatic number of runs to fit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from vstream.config.model import ModelConfig, RuntimeOptions
from vstream.cores import available_cores

log = logging.getLogger("vstream.engine")

MAX_AUTO_RUNS = 8
"""Most runs the automatic plan puts in flight; past it, cores go to more threads per run."""

EXTRA_BUFFERS = 2
"""Buffers besides one per run: the batch being gathered and the one in postprocessing."""

CUDA_EXTRA_BUFFERS = 3
"""On CUDA one more: a gathered batch waits, letterboxed, while the GPU runs the one before,
so the host never leaves the GPU without the next batch queued."""


@dataclass(frozen=True)
class RunPlan:
    """The model's runs in flight, threads per run and batch buffers, and where they came from."""

    device: str
    """``cpu`` or ``cuda``: what the defaults were chosen for."""
    concurrent_runs: int
    threads_per_run: int
    """ONNX Runtime's intra-op threads per run; 0 leaves ONNX Runtime's own default (GPU)."""
    buffers: int
    cores: int
    chosen_by: str
    """What decided the runs and threads: ``auto``, or the options the user set."""

    @property
    def runs_text(self) -> str:
        """``2 runs x 1 thread``: the part a run's summary line shows."""
        threads = (
            f"{self.threads_per_run} thread{'s' if self.threads_per_run != 1 else ''}"
            if self.threads_per_run
            else "default threads"
        )
        return f"{self.concurrent_runs} run{'s' if self.concurrent_runs != 1 else ''} x {threads}"

    def describe(self) -> str:
        """One line for logs: ``2 runs x 1 thread, 4 buffers (auto, 2 cores)``."""
        return f"{self.runs_text}, {self.buffers} buffers ({self.chosen_by}, {self.cores} cores)"


def plan_runs(
    model: ModelConfig, runtime: RuntimeOptions, device: str, cores: int | None = None
) -> RunPlan:
    """The plan for ``model`` on ``device`` (``cpu``/``cuda``) with ``runtime``'s options.

    ``cores`` defaults to :func:`available_cores`; tests pass it to check the rule.
    """
    cores = cores or available_cores()
    runs, threads, buffers = runtime.concurrent_runs, model.intra_op_threads, runtime.in_flight
    given = [
        name
        for name, value in (
            ("concurrent_runs", runs),
            ("intra_op_threads", threads or None),
            ("in_flight", buffers),
        )
        if value is not None
    ]
    room = max(1, buffers - EXTRA_BUFFERS) if buffers is not None else MAX_AUTO_RUNS
    if device != "cpu":
        if runs is not None and runs > 1:
            log.warning(
                "runtime.concurrent_runs=%d: on CUDA the model runs one batch at a time (ONNX "
                "Runtime's CUDA provider has one compute stream per session, so runs cannot "
                "overlap on the GPU); running 1",
                runs,
            )
        runs = 1
    elif runs is None:
        runs = max(1, min(cores // threads if threads else cores, MAX_AUTO_RUNS, room))
    if device == "cpu" and not threads:
        threads = max(1, cores // runs)
    return RunPlan(
        device=device,
        concurrent_runs=runs,
        threads_per_run=threads,
        buffers=buffers
        if buffers is not None
        else runs + (EXTRA_BUFFERS if device == "cpu" else CUDA_EXTRA_BUFFERS),
        cores=cores,
        chosen_by="set: " + ", ".join(given) if given else "auto",
    )


__all__ = ["MAX_AUTO_RUNS", "RunPlan", "plan_runs"]
