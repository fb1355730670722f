"""A stream's state as bytes, and back: how tracks, counts and readings follow a moved stream.

A cluster worker tracks its streams, counts their crossings and reads their
objects with its secondary models itself; when the worker is lost, the
stream goes on elsewhere after the last record the driver delivered. The
driver keeps, with that record, the stream's state as it stood right after
it (:class:`Carried`: the tracker, lines, zones, shapes and masks of its
:class:`~vstream.analytics.stream.StreamAnalytics`, and each secondary
model's last reading of each track), and the next worker starts from it: a
file's records after the move are those of a run that never moved (same
track ids, counts, events and readings).

Pickle, with one addition: read-only mappings (``MappingProxyType``, the
empty attributes every track starts with) go as plain dicts and come back
read-only. The bytes travel only between the processes of one run, which
trust each other (Ray pickles every call's arguments the same way).
"""

from __future__ import annotations

import copyreg
import io
import pickle
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from vstream.analytics.stream import StreamAnalytics
    from vstream.cascade.attributes import AttributeCache


class Carried(NamedTuple):
    """What a stream carries to its next worker."""

    analytics: StreamAnalytics
    readings: dict[int, AttributeCache]
    """Per secondary model (its position in the pipeline's ``secondary``), each track's last
    reading; empty without secondary models."""


def _read_only(items: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(items)


def _array(data: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()  # writeable, owning


_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH[MappingProxyType] = lambda mapping: (_read_only, (dict(mapping),))
# A tracker is columns of small arrays: as raw bytes (but arrays of Python objects) they
# pickle faster than by numpy's own reduction, which pickles a dtype object per array
# (benchmarks/carry.py: about a fifth off the whole state).
_DISPATCH[np.ndarray] = lambda array: (
    array.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    if array.dtype.hasobject
    else (_array, (np.ascontiguousarray(array).tobytes(), array.dtype.str, array.shape))
)


def dumps(analytics: StreamAnalytics, readings: dict[int, AttributeCache] | None = None) -> bytes:
    """A stream's state as it stands now, as bytes (a few kB for tens of tracks)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump((analytics, readings or {}))
    return buffer.getvalue()


def loads(data: bytes) -> Carried:
    """The state :func:`dumps` wrote, ready to take the stream's next frame."""
    from vstream.analytics.stream import StreamAnalytics

    loaded = pickle.loads(data)
    if not (
        isinstance(loaded, tuple)
        and len(loaded) == 2
        and isinstance(loaded[0], StreamAnalytics)
        and isinstance(loaded[1], dict)
    ):
        raise TypeError(f"not a stream's state: {type(loaded).__name__}")
    return Carried(*loaded)
