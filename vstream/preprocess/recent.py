"""What preprocessing makes once per picture size and keeps while the sizes in use are few."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, ValuesView
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


class Recent(Generic[Key, Value]):
    """Values made on first use of their key, the least recently used dropped past ``size``.

    Resampling plans, FFmpeg's scaling contexts and the kernel's taps are made
    once per picture size; streams change sizes rarely, so a few stay, and a
    source that changes size at every frame costs only their making.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Key, Value] = OrderedDict()

    def get(self, key: Key, make: Callable[[], Value]) -> Value:
        value = self._items.get(key)
        if value is None:
            value = self._items[key] = make()
            if len(self._items) > self.size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(key)
        return value

    def values(self) -> ValuesView[Value]:
        return self._items.values()

    def __len__(self) -> int:
        return len(self._items)
