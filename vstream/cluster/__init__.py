"""Streams placed on a Ray cluster: a driver, its workers, and what moves between them.

- :mod:`~vstream.cluster.connect`: Ray started locally on 127.0.0.1, or a cluster joined;
- :mod:`~vstream.cluster.worker`: a Ray actor running the pipelines (detectors, trackers);
- :mod:`~vstream.cluster.relay`: the bounded queue of records a worker keeps for the driver;
- :mod:`~vstream.cluster.placement`: which worker takes a stream, by capacity;
- :mod:`~vstream.cluster.stream`: a stream as the driver keeps it (delivered, resume point);
- :mod:`~vstream.cluster.slots`: the driver's worker slots: start, wait, kill, replace;
- :mod:`~vstream.cluster.roster`: which stream is on which worker; moves off lost or stuck ones;
- :mod:`~vstream.cluster.collect`: the driver's control thread: the calls, records accepted;
- :mod:`~vstream.cluster.deliver`: the driver's delivery thread: records to the sinks;
- :mod:`~vstream.cluster.driver`: :class:`ClusterEngine`, the engine interface over all that;
- :mod:`~vstream.cluster.processes`: ``processes: N``, the local cluster that shares a GPU.

Nothing here imports Ray until a config asks for it: Ray is the optional
extra ``vstream[ray]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vstream.config.pipelines import VstreamConfig

if TYPE_CHECKING:
    from vstream.engine.interface import StreamEngine


def open_engine(config: VstreamConfig, *, base_dir: Path | None = None) -> StreamEngine:
    """The engine a config asks for: one process (:class:`~vstream.engine.Engine`) or a cluster.

    With a ``cluster:`` section, or ``processes`` above 1 (the local cluster
    it stands for, :mod:`vstream.cluster.processes`), this connects to Ray
    (or starts it) and starts the workers, which load their models; a
    missing Ray, a cluster that cannot be reached and a model that does not
    load are each one :class:`~vstream.errors.VstreamError`.
    """
    from vstream.cluster.processes import resolve

    config = resolve(config)
    if config.cluster is None:
        from vstream.engine import Engine

        return Engine(config, base_dir=base_dir)
    from vstream.cluster.connect import import_ray

    import_ray(local=config.cluster.address is None)
    from vstream.cluster.driver import ClusterEngine

    return ClusterEngine(config, base_dir=base_dir)


__all__ = ["open_engine"]
