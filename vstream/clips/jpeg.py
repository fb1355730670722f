"""JPEG encoding of an RGB picture, downscaled on its own device first.

Shared by the event snapshots and the live preview. A CUDA tensor is resized
and encoded on the GPU (nvJPEG through torchvision) where torchvision can, so
only the JPEG's bytes cross to the host; otherwise on the CPU.
"""

from __future__ import annotations

import io
import logging
import warnings
from typing import Any

log = logging.getLogger(__name__)

_cuda_encode_failed = False


def as_rgb(image: Any) -> Any:
    """``image`` as a ``uint8`` torch tensor of shape ``(H, W, 3)`` (a NumPy array is wrapped)."""
    import torch

    tensor = image if isinstance(image, torch.Tensor) else torch.from_numpy(image)
    if tensor.dtype != torch.uint8 or tensor.dim() != 3 or tensor.shape[2] != 3:
        raise ValueError(
            f"expected an RGB uint8 picture of shape (H, W, 3), "
            f"got {tuple(tensor.shape)} {tensor.dtype}"
        )
    return tensor


def scaled_size(width: int, height: int, max_width: int | None) -> tuple[int, int]:
    """``(width, height)`` no wider than ``max_width``, aspect kept (at least 1 x 1)."""
    if not max_width or width <= max_width:
        return width, height
    return max_width, max(1, round(height * max_width / width))


def downscale(image: Any, max_width: int | None) -> Any:
    """The ``(H, W, 3)`` picture as ``(3, h, w)``, no wider than ``max_width``, on its device."""
    chw = as_rgb(image).permute(2, 0, 1)
    height, width = chw.shape[1:]
    new_width, new_height = scaled_size(width, height, max_width)
    if (new_width, new_height) != (width, height):
        # torch's antialiased bilinear resize, as torchvision's resize runs it, without
        # `import torchvision` (it loads torch._dynamo: seconds, which a first snapshot
        # waited for). torch resizes uint8 this way on the CPU only: on a GPU in float.
        import torch
        from torch.nn.functional import interpolate

        size = (new_height, new_width)
        batch = chw.unsqueeze(0)
        if batch.is_cuda:
            resized = interpolate(batch.float(), size, mode="bilinear", antialias=True)
            batch = resized.round_().clamp_(0, 255).to(torch.uint8)
        else:
            batch = interpolate(batch, size, mode="bilinear", antialias=True)
        chw = batch[0]
    return chw.contiguous()


def encode_jpeg(image: Any, quality: int = 85, max_width: int | None = None) -> bytes:
    """JPEG bytes of an RGB ``(H, W, 3)`` uint8 picture (torch, any device, or NumPy).

    On the CPU, Pillow's libjpeg-turbo encodes it (torchvision's image
    encoders are deprecated from 0.29 on); a CUDA picture is encoded by nvJPEG
    where torchvision still has it.
    """
    global _cuda_encode_failed

    chw = downscale(image, max_width)
    if chw.is_cuda and not _cuda_encode_failed:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                from torchvision.io import encode_jpeg as tv_encode

                return tv_encode(chw, quality=quality).cpu().numpy().tobytes()
        except Exception as exc:  # a torchvision without nvJPEG: the CPU will do
            _cuda_encode_failed = True
            log.info("JPEG encoding on the GPU is not available (%s); using the CPU", exc)
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(chw.permute(1, 2, 0).cpu().numpy()).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()
