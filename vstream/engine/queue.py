"""The bounded hand-over between a source's reader thread and the pipeline.

Its policy decides what happens when the pipeline is slower than the stream:
``latest`` drops the oldest frame (so results never lag behind a live
camera, and every drop is counted), ``block`` makes the reader wait.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Generator, Iterator
from typing import Generic, TypeVar

from vstream.sources.options import FreshnessPolicy

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


def through_thread(items: Generator[T, None, None], queue: FrameQueue[T], name: str) -> Iterator[T]:
    """``items``, produced by a thread of their own and handed over through ``queue``.

    An exception raised while producing is raised here, after the items
    produced before it; leaving the iteration early stops the producer.
    """
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            for item in items:
                if not queue.put(item):
                    break
        except BaseException as exc:  # handed to the consumer, never lost in the thread
            failure.append(exc)
        finally:
            items.close()
            queue.close()

    producer = threading.Thread(target=produce, name=name, daemon=True)
    producer.start()
    try:
        while (item := queue.get()) is not None:
            yield item
    finally:
        queue.close()
    if failure:
        raise failure[0]
