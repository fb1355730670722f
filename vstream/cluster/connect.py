"""The driver's connection to Ray: a local instance of its own, or a cluster that exists.

With no ``cluster.address``, the driver starts a local Ray instance for the
run: every Ray process listens on 127.0.0.1 only (Ray's loopback-only mode,
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, set before Ray is imported), with
no dashboard, no usage statistics, a small object store (records are small
and travel inline), and exactly the CPUs the workers reserve; it is shut
down at the end, and no Ray process outlives the run. With an address, the
driver joins that cluster and leaves it running. When the embedding
program has connected to Ray already, that connection is used and left open.

Ray's driver prints the cluster's error messages itself (``(raylet) A worker
died ...``, a node marked dead), on the process's stdout, where ``vstream run``
may be writing records; while this run owns the connection they go to
vstream's log instead (``vstream.cluster``, level info: the driver logs every
loss and move itself).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import signal
import sys
import threading
from types import ModuleType
from typing import Any

from vstream.config.cluster import ClusterConfig
from vstream.errors import VstreamError

log = logging.getLogger("vstream.cluster")

LOCAL_OBJECT_STORE_BYTES = 100 * 2**20
"""Object store of a local instance: records travel inline, so it stays nearly empty."""

INSTALL_HINT = "pip install 'vstream[ray]'"


def import_ray(local: bool) -> ModuleType:
    """Ray, imported for a local instance (loopback only) or a cluster; one clear line if absent."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if local and "ray" not in sys.modules:
        # Read once, when Ray is imported: without it a local instance listens on every
        # interface of the machine.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise VstreamError(ray_missing()) from None
    return ray


def ray_installed() -> bool:
    """Whether Ray is installed: found, not imported (importing it takes seconds)."""
    return importlib.util.find_spec("ray") is not None


def ray_missing(asked: str = "cluster.engine ray") -> str:
    """One line for a config whose ``asked`` setting needs Ray, where Ray is not installed."""
    return f"the config asks for {asked}, but Ray is not installed: {INSTALL_HINT}"


class RayConnection:
    """Ray for one run: connected (or started) here, and let go by :meth:`close`."""

    def __init__(self, cluster: ClusterConfig) -> None:
        local = cluster.address is None
        self.ray = ray = import_ray(local)
        self.owned = not ray.is_initialized()
        """This run connected to Ray (and, without an address, started it); close() ends that."""
        if not self.owned:
            log.info("using the Ray connection this process has already")
            return
        self._printer = _log_ray_messages()
        # ray.init() puts a SIGTERM handler of its own in place (exit at once); vstream's
        # graceful stop needs its own back.
        previous = signal.getsignal(signal.SIGTERM)
        try:
            if local:
                # Ray starts its workers at niceness 15; here they do the pipeline's work,
                # and anything else on the machine would starve them (frames dropped).
                os.environ.setdefault("RAY_worker_niceness", "0")
                cpus = max(1, math.ceil(cluster.workers * cluster.cpus_per_worker))
                ray.init(
                    address="local",
                    num_cpus=cpus,
                    object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            else:
                ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, TimeoutError, ValueError) as exc:
            _restore_printer(self._printer)
            raise VstreamError(
                f"cannot {'start a local Ray instance' if local else 'join the Ray cluster at '}"
                f"{'' if local else cluster.address}: {str(exc).splitlines()[0]}"
            ) from None
        finally:
            if previous is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, previous)
        node = ray.util.get_node_ip_address()
        if local and node != "127.0.0.1":
            log.warning("the local Ray instance listens on %s, not only on 127.0.0.1", node)
        log.info(
            "%s Ray: %s",
            "started a local" if local else "joined",
            ", ".join(f"{k} {v:g}" for k, v in sorted(self.resources().items())),
        )

    def resources(self) -> dict[str, float]:
        """CPUs and GPUs of the whole cluster."""
        totals = self.ray.cluster_resources()
        return {k: float(totals[k]) for k in ("CPU", "GPU") if k in totals}

    def close(self) -> None:
        """Stop the local instance (or leave the cluster); a connection found open stays open."""
        if self.owned and self.ray.is_initialized():
            self.ray.shutdown()
        if self.owned:
            _restore_printer(self._printer)


_RAY_WORKER = "ray._private.worker"
"""Where Ray's driver prints what the cluster reports (``print_to_stdstream``)."""


def _log_ray_messages() -> Any:
    """Send what Ray's driver would print to vstream's log; Ray's own printer, to restore.

    Ray has no option for it: its error listener looks ``print_to_stdstream``
    up in its module at each message. A Ray without that function keeps
    printing (None is returned).
    """
    module = sys.modules.get(_RAY_WORKER)
    printer = getattr(module, "print_to_stdstream", None)
    if module is None or printer is None:
        return None

    def to_log(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        for line in data.get("lines", []):
            log.info("Ray (%s): %s", data.get("pid") or "driver", line)

    module.print_to_stdstream = to_log
    return printer


def _restore_printer(printer: Any) -> None:
    module = sys.modules.get(_RAY_WORKER)
    if printer is not None and module is not None:
        module.print_to_stdstream = printer
