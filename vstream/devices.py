"""Devices with their index: the one place vstream decides whether two devices are the same.

``torch.device("cuda")`` means "the current CUDA device" and has no index;
every CUDA tensor reports an indexed device (``cuda:0``), and torch compares
devices field by field, so ``torch.device("cuda:0") == torch.device("cuda")``
is False. A check written as ``tensor.device != self.device`` therefore
refuses every frame of a pipeline whose device was written ``cuda`` (that is
how NVDEC came to be never used). So devices are resolved to an index once,
where a pipeline picks its device (:func:`indexed`), and compared only through
:func:`same_device`, which resolves a missing index on either side.
"""

from __future__ import annotations

import torch


def indexed(device: torch.device | str) -> torch.device:
    """``device`` with its index: ``cuda`` is the current CUDA device; other types unchanged.

    Without a usable CUDA device, ``cuda`` becomes ``cuda:0``: nothing runs
    there anyway, and the error that follows names the real problem.
    """
    device = torch.device(device)
    if device.type != "cuda" or device.index is not None:
        return device
    index = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return torch.device("cuda", index)


def same_device(a: torch.device | str, b: torch.device | str) -> bool:
    """Whether ``a`` and ``b`` are one device, ``cuda`` meaning the current CUDA device."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return (a.index or 0) == (b.index or 0)
    return indexed(a).index == indexed(b).index
