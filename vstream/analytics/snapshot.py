"""A stream's analytics as bytes, and back: how tracks and counts follow a moved stream.

A cluster worker tracks its streams and counts their crossings itself; when
the worker is lost, the stream goes on elsewhere after the last record the
driver delivered. The driver keeps, with that record, the stream's
:class:`~vstream.analytics.stream.StreamAnalytics` as it stood right after it
(tracker, lines, zones, shapes and masks), and the next worker starts from
it: a file's records after the move are those of a run that never moved
(same track ids, same counts, same events).

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vstream.analytics.stream import StreamAnalytics


def _read_only(items: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(items)


_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH[MappingProxyType] = lambda mapping: (_read_only, (dict(mapping),))


def dumps(analytics: StreamAnalytics) -> bytes:
    """``analytics`` as it stands now, as bytes (a few kB for tens of tracks)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(analytics)
    return buffer.getvalue()


def loads(data: bytes) -> StreamAnalytics:
    """The analytics :func:`dumps` wrote, ready to take the stream's next frame."""
    from vstream.analytics.stream import StreamAnalytics

    analytics = pickle.loads(data)
    if not isinstance(analytics, StreamAnalytics):
        raise TypeError(f"not a stream's analytics: {type(analytics).__name__}")
    return analytics
