"""Turning raw detector output into final boxes, on the device.

Candidates are filtered by confidence and class, suppressed with
torchvision's NMS kernel (:mod:`vstream.postprocess.nms`), capped per frame
and mapped back to the pixels of each original frame. The result is one
compact tensor per batch, the only data the pipeline ever copies to the host.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vstream.config.model import PostprocessOptions
from vstream.postprocess.formats import OutputFormat, check_output_shape, class_count
from vstream.postprocess.nms import batched_nms, cxcywh_to_xyxy
from vstream.preprocess.letterbox import LetterboxGeometry

DETECTION_COLUMNS = ("frame", "x1", "y1", "x2", "y2", "score", "class_id")
"""Columns of the detections tensor; ``frame`` is the position in the batch."""


def _rank_within_frame(frame: torch.Tensor, n_frames: int) -> torch.Tensor:
    """Position of each row among the rows of its frame; rows must be grouped by frame."""
    counts = torch.bincount(frame, minlength=n_frames)
    starts = torch.cumsum(counts, 0) - counts
    return torch.arange(frame.numel(), device=frame.device) - starts[frame]


def _group_by_frame(frame: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """Order rows by frame, then by decreasing score."""
    by_score = torch.argsort(score, descending=True)
    return by_score[torch.argsort(frame[by_score], stable=True)]


class Postprocessor:
    """Decodes one detector output format into the detections tensor."""

    def __init__(self, fmt: OutputFormat, config: PostprocessOptions, device: torch.device) -> None:
        self.format = fmt
        self.config = config
        self.device = device
        self._classes = (
            torch.tensor(config.classes, device=device) if config.classes is not None else None
        )
        self._geometry_key: tuple[LetterboxGeometry, ...] = ()
        self._geometry = torch.empty((0, 5), device=device)

    def _geometry_tensor(self, geometries: Sequence[LetterboxGeometry]) -> torch.Tensor:
        """Per frame (pad_x, pad_y, gain, width, height), rebuilt only when frames change size."""
        key = tuple(geometries)
        if key != self._geometry_key:
            rows = [
                (g.box_pad_x, g.box_pad_y, g.gain, g.source_width, g.source_height) for g in key
            ]
            self._geometry = torch.tensor(rows, dtype=torch.float32, device=self.device)
            self._geometry_key = key
        return self._geometry

    def _candidates(
        self, output: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Boxes (xyxy, input pixels), scores, class ids and frame positions above ``conf``."""
        if self.format is OutputFormat.END_TO_END:
            boxes = output[..., :4]
            score = output[..., 4]
            class_id = output[..., 5].round().long()
        else:
            rows = output.transpose(1, 2) if self.format is OutputFormat.YOLOV8 else output
            if self.format is OutputFormat.YOLOV8:
                class_scores = rows[..., 4:]
            else:
                class_scores = rows[..., 5:] * rows[..., 4:5]
            score, class_id = class_scores.max(dim=-1)
            boxes = rows[..., :4]
        keep = score > self.config.conf
        if self._classes is not None:
            keep &= torch.isin(class_id, self._classes)
        frame, anchor = keep.nonzero(as_tuple=True)
        boxes = boxes[frame, anchor].float()
        if self.format is not OutputFormat.END_TO_END:
            boxes = cxcywh_to_xyxy(boxes)
        return boxes, score[frame, anchor].float(), class_id[frame, anchor], frame

    def __call__(
        self, output: torch.Tensor, geometries: Sequence[LetterboxGeometry]
    ) -> torch.Tensor:
        """Detections for the first ``len(geometries)`` frames of ``output``.

        Returns a float32 tensor of shape ``(M, 7)`` with columns
        :data:`DETECTION_COLUMNS`, grouped by frame, highest score first.
        """
        check_output_shape(self.format, tuple(output.shape))
        n_frames = len(geometries)
        boxes, score, class_id, frame = self._candidates(output[:n_frames])

        order = _group_by_frame(frame, score)
        order = order[_rank_within_frame(frame[order], n_frames) < self.config.max_candidates]
        boxes, score, class_id, frame = boxes[order], score[order], class_id[order], frame[order]
        if self.format is not OutputFormat.END_TO_END:
            groups = frame * class_count(self.format, tuple(output.shape)) + class_id
            kept = batched_nms(boxes, score, groups, self.config.iou)
            kept = kept[torch.argsort(frame[kept], stable=True)]
            boxes, score, class_id, frame = boxes[kept], score[kept], class_id[kept], frame[kept]
        capped = _rank_within_frame(frame, n_frames) < self.config.max_det
        boxes, score, class_id, frame = (
            boxes[capped],
            score[capped],
            class_id[capped],
            frame[capped],
        )

        geometry = self._geometry_tensor(geometries)[frame]
        pad = geometry[:, 0:2].repeat(1, 2)
        boxes = (boxes - pad) / geometry[:, 2:3]
        limits = geometry[:, 3:5].repeat(1, 2)
        boxes = torch.minimum(boxes.clamp_(min=0.0), limits)
        return torch.cat(
            [frame[:, None].float(), boxes, score[:, None], class_id[:, None].float()], dim=1
        )
