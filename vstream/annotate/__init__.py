"""Drawing results on frames, on the device where the frames are.

:func:`frame_to_rgb` turns a :class:`~vstream.frame.Frame` of any pixel format
into an owned RGB ``uint8`` ``(H, W, 3)`` tensor on its device, and an
:class:`Annotator` draws boxes, labels, track ids, counting lines, zones and a
status line on it in place. The result feeds the annotated-video writer
(:class:`vstream.sinks.video.writer.VideoWriter`), the live preview and snapshots.
"""

from vstream.lazy import lazy_exports

__all__ = [
    "CLASS_COLOURS",
    "Annotator",
    "GlyphAtlas",
    "LineOverlay",
    "ZoneOverlay",
    "class_colour",
    "frame_to_rgb",
    "glyph_atlas",
    "rgb_to_yuv420",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CLASS_COLOURS": "vstream.annotate.annotator",
        "Annotator": "vstream.annotate.annotator",
        "LineOverlay": "vstream.annotate.annotator",
        "ZoneOverlay": "vstream.annotate.annotator",
        "class_colour": "vstream.annotate.annotator",
        "GlyphAtlas": "vstream.annotate.font",
        "glyph_atlas": "vstream.annotate.font",
        "frame_to_rgb": "vstream.annotate.convert",
        "rgb_to_yuv420": "vstream.annotate.convert",
    },
)
