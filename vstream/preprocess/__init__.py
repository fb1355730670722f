"""Preprocessing on the device: colour conversion and letterbox into the model input."""

from vstream.preprocess.colour import to_rgb_planar
from vstream.preprocess.letterbox import PAD_VALUE, Letterboxer, LetterboxGeometry

__all__ = ["PAD_VALUE", "LetterboxGeometry", "Letterboxer", "to_rgb_planar"]
