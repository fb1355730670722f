"""Preprocessing on the device: colour conversion and letterbox into the model input."""

from vstream.lazy import lazy_exports

__all__ = ["PAD_VALUE", "LetterboxGeometry", "Letterboxer", "to_rgb_planar"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "PAD_VALUE": "vstream.preprocess.letterbox",
        "LetterboxGeometry": "vstream.preprocess.letterbox",
        "Letterboxer": "vstream.preprocess.letterbox",
        "to_rgb_planar": "vstream.preprocess.colour",
    },
)
