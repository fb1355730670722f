"""A bounded hand-over between threads, closable from either side.

The stages pass batches and free buffers through these; the policy decides
what a full queue does: ``block`` makes the producer wait (backpressure),
``latest`` drops the oldest item and counts it.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

from vstream.config.sources import FreshnessPolicy

T = TypeVar("T")


class FrameQueue(Generic[T]):
    """A bounded FIFO with a freshness policy, closable from either side.

    After :meth:`close`, :meth:`put` refuses new items at once and :meth:`get`
    returns what is left, then None; blocked callers on both sides wake up.
    """

    def __init__(self, maxsize: int, policy: FreshnessPolicy) -> None:
        if maxsize < 1:
            raise ValueError(f"queue size must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self.policy = FreshnessPolicy(policy)
        self.dropped = 0
        """Items discarded by the ``latest`` policy."""
        self._items: deque[T] = deque()
        self._closed = False
        self._changed = threading.Condition()

    def put(self, item: T) -> bool:
        """Add ``item``; False when the queue is closed (the item is not kept)."""
        with self._changed:
            if self.policy is FreshnessPolicy.BLOCK:
                while len(self._items) >= self.maxsize and not self._closed:
                    self._changed.wait()
            if self._closed:
                return False
            if len(self._items) >= self.maxsize:
                self._items.popleft()
                self.dropped += 1
            self._items.append(item)
            self._changed.notify_all()
            return True

    def get(self, timeout: float | None = None) -> T | None:
        """The oldest item; None once closed and empty, or after ``timeout`` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._items or self._closed, timeout):
                return None
            if not self._items:
                return None
            item = self._items.popleft()
            self._changed.notify_all()
            return item

    def wait_until_empty(self) -> bool:
        """Wait until every item was taken; False if the queue was closed first."""
        with self._changed:
            self._changed.wait_for(lambda: not self._items or self._closed)
            return not self._closed

    def clear(self) -> None:
        """Forget every queued item (on close: nobody will read them)."""
        with self._changed:
            self._items.clear()
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)
