"""The ``cluster:`` section: streams placed on the workers of a Ray cluster.

Without it, every pipeline runs in the one vstream process. With it, the
process becomes a *driver*: each worker is a Ray actor running the same
pipelines (one detector per worker, on its own GPU where there are GPUs),
the driver places streams on workers by capacity, moves them when a worker is
lost, and runs the sinks. Ray is an optional extra (``vstream[ray]``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from vstream.config.base import Int, Number, Seconds, StrictModel

ADDRESS_PATTERN = r"^(auto|(ray://)?[A-Za-z0-9_.-]{1,253}:[0-9]{1,5})$"
"""``auto``, ``HOST:PORT`` (the head's GCS, from a node of the cluster) or ``ray://HOST:PORT``."""


def _address(value: Any) -> Any:
    if isinstance(value, str) and not re.fullmatch(ADDRESS_PATTERN, value):
        raise ValueError(f"must be auto, HOST:PORT or ray://HOST:PORT, got {value!r}")
    return value


class ClusterConfig(StrictModel):
    """Where the workers run and how many there are; what the driver does when one is lost."""

    engine: Literal["ray"] = Field(description="the cluster engine; Ray is the one supported")
    address: Annotated[str | None, Field(pattern=ADDRESS_PATTERN), BeforeValidator(_address)] = (
        Field(
            None,
            description="null: start a local Ray instance on 127.0.0.1 for the run and stop it at "
            "the end; auto: join the cluster this node belongs to (ray start); HOST:PORT: the head "
            "node's address; ray://HOST:PORT: a Ray Client server",
        )
    )
    workers: Int(1, 4096) = Field(1, description="worker actors, each with its own detector")
    gpus_per_worker: Number(0, 64) | None = Field(
        None,
        description="GPUs each worker reserves; default: 1 where the pipelines may use CUDA and "
        "the cluster has GPUs (on a local instance with more workers than GPUs, an equal share "
        "of one: Ray's fractional GPUs), else 0",
    )
    cpus_per_worker: Number(0, 1024) = Field(
        1.0, description="CPUs each worker reserves (decoding runs on them)"
    )
    max_streams_per_worker: Int(1, 10_000) = Field(
        64, description="streams one worker holds at most; the others wait for room"
    )
    nvdec_sessions_per_worker: Int(0, 1024) = Field(
        32,
        description="streams a GPU worker decodes with NVDEC at most; past it, decoder auto "
        "streams decode on its CPU and decoder nvdec streams go elsewhere",
    )
    max_buffered_records: Int(16, 1_000_000) = Field(
        2048,
        description="records a worker holds for the driver; when full, the worker's pipeline "
        "waits (files) or its live streams drop frames by their policy (counted)",
    )
    max_worker_restarts: Int(0, 10_000) = Field(
        8,
        description="workers started in place of lost ones, over the whole run; past it, lost "
        "workers are not replaced",
    )
    max_stream_moves: Int(0, 1000) = Field(
        3,
        description="times a stream is moved after losing its worker; one lost more often fails "
        "(a stream that brings its workers down)",
    )
    stall_timeout_seconds: Seconds(1, 3600) = Field(
        60.0,
        description="a stream its worker reports as reading, but whose records stop coming for "
        "this long while the driver asks for them, and whose frames its worker stops taking too "
        "(a stuck pipeline, not a slow one), is moved to another worker after its last "
        "delivered frame; counted. Longer than a live source's open and read timeouts, so that "
        "a camera's own faults are left to its reconnects",
    )
    start_timeout_seconds: Seconds(1, 3600) = Field(
        300.0,
        description="how long the first workers may take to be placed and load their models; "
        "past it the run fails (the cluster lacks what the workers ask for)",
    )
