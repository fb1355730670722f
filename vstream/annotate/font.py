"""Text for overlays: a glyph atlas rasterised once, blitted on the device by indexing.

Pillow's own default font (``ImageFont.load_default``: Aileron Regular where
Pillow has FreeType, its small bitmap font otherwise; both ship inside Pillow)
draws the printable ASCII characters 32..126 once per size into a ``uint8``
coverage mask. A string becomes a list of atlas *columns* (glyphs are laid out
by their rounded advance, without kerning), so rendering a whole frame's labels
on the device is one gather from the atlas, whatever the number of characters.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from vstream import transfer

FIRST_CHAR = 32
LAST_CHAR = 126
REPLACEMENT = "?"
"""Drawn for any character outside printable ASCII."""

_BITMAP_FONT_PIXELS = 11
"""Approximate size of Pillow's bitmap fallback font, scaled by whole multiples."""


@dataclass(eq=False)
class GlyphAtlas:
    """The glyphs of printable ASCII at one pixel size.

    ``masks[code - 32]`` is the coverage (0..255) of a character in a cell of
    ``height`` rows and ``widths[code - 32]`` columns (padded to the widest glyph).
    """

    size: int
    height: int
    widths: tuple[int, ...]
    masks: np.ndarray
    _starts: tuple[int, ...] = field(init=False, repr=False)
    _columns: dict[str, torch.Tensor] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        cell = self.masks.shape[2]
        self._starts = tuple(i * cell for i in range(len(self.widths)))

    @property
    def blank_column(self) -> int:
        """Index of an empty column in :meth:`columns` (for padding)."""
        return self.masks.shape[0] * self.masks.shape[2]

    @staticmethod
    def _code(char: str) -> int:
        code = ord(char)
        if not FIRST_CHAR <= code <= LAST_CHAR:
            code = ord(REPLACEMENT)
        return code - FIRST_CHAR

    def text_width(self, text: str) -> int:
        """Width in pixels of ``text`` drawn with this atlas."""
        return sum(self.widths[self._code(c)] for c in text)

    def column_indices(self, text: str) -> list[int]:
        """Rows of :meth:`columns` that, in order, spell ``text``."""
        out: list[int] = []
        for char in text:
            code = self._code(char)
            start = self._starts[code]
            out.extend(range(start, start + self.widths[code]))
        return out

    def columns(self, device: torch.device | str) -> torch.Tensor:
        """Glyph columns as rows, ``(glyphs * cell_width + 1, height)`` ``uint8`` on ``device``.

        The last row is blank. Made once per device and kept.
        """
        key = str(torch.device(device))
        table = self._columns.get(key)
        if table is None:
            with self._lock:
                table = self._columns.get(key)
                if table is None:
                    glyphs, height, cell = self.masks.shape
                    host = np.zeros((glyphs * cell + 1, height), np.uint8)
                    host[:-1] = self.masks.transpose(0, 2, 1).reshape(glyphs * cell, height)
                    table = torch.from_numpy(host).to(device)
                    self._columns[key] = table
        return table

    def render(self, text: str, device: torch.device | str = "cpu") -> torch.Tensor:
        """The coverage mask of ``text``: ``(height, width)`` ``uint8`` on ``device``."""
        table = self.columns(device)
        index = transfer.upload(
            torch.tensor(self.column_indices(text), dtype=torch.int64), table.device
        )
        return table[index].t().contiguous()


def _rasterise(font: object, scale: int) -> tuple[int, tuple[int, ...], np.ndarray]:
    from PIL import Image, ImageDraw, ImageFont

    chars = [chr(c) for c in range(FIRST_CHAR, LAST_CHAR + 1)]
    if isinstance(font, ImageFont.FreeTypeFont):
        ascent, descent = font.getmetrics()
        cell_height = ascent + descent
    else:
        cell_height = max(font.getbbox(c)[3] for c in chars) + 1
    widths = [max(1, round(font.getlength(c))) for c in chars]
    # Pillow's default font has a narrow space: widen it so that words stay apart.
    widths[0] = max(widths[0], round(cell_height * 0.3))
    cell_width = max(widths)
    masks = np.zeros((len(chars), cell_height, cell_width), np.uint8)
    for i, char in enumerate(chars):
        image = Image.new("L", (cell_width, cell_height), 0)
        ImageDraw.Draw(image).text((0, 0), char, font=font, fill=255)
        masks[i] = np.asarray(image)
        masks[i, :, widths[i] :] = 0  # ink past the advance would overlap the next glyph
    # Crop the rows no glyph uses (above the tallest ascender, below the deepest descender).
    inked = np.flatnonzero(masks.max(axis=(0, 2)))
    if inked.size:
        masks = masks[:, inked[0] : inked[-1] + 1]
    if scale > 1:
        masks = masks.repeat(scale, axis=1).repeat(scale, axis=2)
        widths = [w * scale for w in widths]
    return masks.shape[1], tuple(widths), np.ascontiguousarray(masks)


@functools.lru_cache(maxsize=8)
def glyph_atlas(size: int) -> GlyphAtlas:
    """The atlas of Pillow's default font at about ``size`` pixels, built once per size."""
    from PIL import ImageFont

    if size < 6:
        raise ValueError(f"font size must be at least 6 pixels, got {size}")
    try:
        font = ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):  # an old Pillow, or one without FreeType
        font = ImageFont.load_default()
    scale = 1
    if not isinstance(font, ImageFont.FreeTypeFont):
        scale = max(1, round(size / _BITMAP_FONT_PIXELS))
    height, widths, masks = _rasterise(font, scale)
    return GlyphAtlas(size=size, height=height, widths=widths, masks=masks)
