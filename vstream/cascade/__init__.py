"""Cascades: secondary models that read each detected object's crop (issue 23).

- :mod:`~vstream.cascade.crops`: crops cut from the decoded frame on its device (roi_align);
- :mod:`~vstream.cascade.model`: :class:`SecondaryModel`, a classifier or embedder with its
  crop batch and outputs bound to ONNX Runtime by address;
- :mod:`~vstream.cascade.attributes`: the per-track cache that decides which objects are
  read again, and marks each result fresh or cached.

Options are in :mod:`vstream.config.secondary`; the model file is checked without torch by
:mod:`vstream.inference.secondary_spec`. A unit of its own because it sits on top of
inference, preprocessing and postprocessing, which must not import one another in a loop.
"""

from vstream.lazy import lazy_exports

__all__ = [
    "AttributeCache",
    "Attributes",
    "SecondaryModel",
    "SecondaryOutput",
    "crop_frame",
    "crop_rgb",
    "record_values",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AttributeCache": "vstream.cascade.attributes",
        "Attributes": "vstream.cascade.attributes",
        "SecondaryModel": "vstream.cascade.model",
        "SecondaryOutput": "vstream.cascade.model",
        "crop_frame": "vstream.cascade.crops",
        "crop_rgb": "vstream.cascade.crops",
        "record_values": "vstream.cascade.attributes",
    },
)
