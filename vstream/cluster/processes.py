"""``processes: N | auto``: several worker processes on this machine, sharing its GPUs.

One Python process tops out near 1,000 frames/s on an H100 host, its GIL the
limit and not the GPU (BENCHMARKS.md, "The readers trimmed ... on one H100").
``processes: N`` stands for the ``cluster:`` section that spreads the streams
over N processes: a local Ray instance on 127.0.0.1 with N workers, each
reserving a share of a GPU (``1/N`` of the one GPU of a machine that has one: Ray's fractional
``num_gpus``, :func:`~vstream.cluster.slots.gpus_per_worker`) and
``cores // N`` CPUs. The driver, placement and exactly-once delivery are the
cluster engine's, unchanged; nothing else is written.

``auto`` picks N with :func:`vstream.cores.auto_processes` from the sources'
frame rates, and means 1 where more processes could not help or not run:
without Ray, without a GPU the pipelines may use (quietly: that is most
machines), and for a config the workers do not run (frame sinks; with one info line,
since it was worth asking).
"""

from __future__ import annotations

import logging

from vstream.cluster.connect import ray_installed, ray_missing
from vstream.cluster.mps import control_pipe
from vstream.config.cluster import ClusterConfig
from vstream.config.pipelines import VstreamConfig
from vstream.config.sources import SourceConfig
from vstream.cores import LIVE_FRAMES_PER_SECOND, auto_processes, available_cores
from vstream.errors import VstreamError
from vstream.uri import is_live

log = logging.getLogger("vstream.cluster")


def resolve(config: VstreamConfig) -> VstreamConfig:
    """``config`` as the engine runs it: ``processes`` replaced by the cluster it stands for.

    One process (or a ``cluster:`` section of its own) leaves the config as
    it is. ``processes: N`` without Ray installed is one clear line.
    """
    count = auto_count(config) if config.processes == "auto" else config.processes
    if count == 1:
        return config
    if not ray_installed():
        raise VstreamError(ray_missing(f"processes {count}"))
    on_gpu = config.processes == "auto" or any(
        p.runtime.device.startswith("cuda") for p in config.pipelines
    )  # auto gives more than one process only where a GPU is
    if on_gpu and control_pipe() is None:
        log.info(
            "processes %d: CUDA MPS is not running, so the processes' kernels take turns on "
            "the GPU; with a model that keeps it busy, start it (nvidia-cuda-mps-control -d) "
            "before vstream",
            count,
        )
    cluster = ClusterConfig(
        engine="ray", workers=count, cpus_per_worker=max(1, available_cores() // count)
    )
    return config.model_copy(update={"cluster": cluster, "processes": 1})


def auto_count(config: VstreamConfig) -> int:
    """The processes ``processes: auto`` stands for here (see the module's docstring)."""
    if not ray_installed():
        return 1
    if all(p.runtime.device == "cpu" for p in config.pipelines) or gpu_count() < 1:
        return 1
    rates = [frame_rate(s) for p in config.pipelines for s in p.sources]
    count = auto_processes(rates, available_cores())
    refused = config.workers_refusal() if count > 1 else None
    if refused is not None:
        log.info("processes auto: 1 rather than %d, as %s", count, refused[0])
        return 1
    if count > 1:
        log.info("processes auto: %d worker processes share the GPU", count)
    return count


def gpu_count() -> int:
    """CUDA devices this process sees (torch counts them without making a context)."""
    import torch

    return torch.cuda.device_count()


def frame_rate(source: SourceConfig) -> float | None:
    """The frames per second a source brings, as ``auto`` counts them; None: as fast as it decodes.

    A camera and a file replayed in real time count as
    :data:`~vstream.cores.LIVE_FRAMES_PER_SECOND` (less with a file's stride);
    any other file is read as fast as the pipeline takes it.
    """
    if is_live(source.uri):
        return LIVE_FRAMES_PER_SECOND
    if source.realtime:
        return LIVE_FRAMES_PER_SECOND / source.stride
    return None
