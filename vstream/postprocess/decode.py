"""Turning raw detector output into final boxes, on the device, with as few host waits as possible.

Candidates are filtered by confidence and class, suppressed with
torchvision's NMS kernel (:mod:`vstream.postprocess.nms`), capped per frame
and mapped back to the pixels of each original frame. The result is one
compact tensor per batch, the only data the pipeline ever copies to the host.

**Host waits.** On CUDA, an operation whose output size depends on the data
(``nonzero``, indexing with a boolean mask, ``.item()``, ``bincount``,
``isin``/``unique``) makes the host wait for the stream to reach it. Three
such waits cannot be avoided, and each is counted, under its name, in
:attr:`vstream.transfer.TransferCounter.implicit_syncs` where it is issued:

- ``candidates``: which boxes score above ``conf`` (one ``nonzero``): their
  number sizes everything after it. This is the wait for the model's run.
- ``nms``: torchvision's CUDA NMS selects the boxes it keeps with a boolean
  mask, so it learns their number on the host.
- ``max_det``: cutting frames down to ``max_det`` boxes, and only when the
  batch kept more than ``max_det`` boxes in all (else no frame can exceed
  it, which the host already knows from the shapes).

All three happen on the postprocessing thread, which waits for this batch
at :func:`vstream.transfer.to_host` anyway; none is in preprocessing or
the model run. Everything else has shapes the host knows in advance: the
cap on candidates per frame is a ``topk``, ranks within a frame come from
``searchsorted`` (CUDA's ``bincount`` reads its input's maximum to the
host), the class filter is a lookup table (``isin`` sorts and makes unique),
and the per-frame geometry is uploaded without a stream synchronisation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vstream.config.model import PostprocessOptions
from vstream.postprocess.formats import OutputFormat, check_output_shape, class_count
from vstream.postprocess.nms import batched_nms, cxcywh_to_xyxy
from vstream.preprocess.letterbox import LetterboxGeometry
from vstream.transfer import transfers, upload

DETECTION_COLUMNS = ("frame", "x1", "y1", "x2", "y2", "score", "class_id")
"""Columns of the detections tensor; ``frame`` is the position in the batch."""


def _rank_within_frame(frame: torch.Tensor) -> torch.Tensor:
    """Position of each row among the rows of its frame; ``frame`` must be sorted."""
    first_of_frame = torch.searchsorted(frame, frame)
    return torch.arange(frame.numel(), device=frame.device) - first_of_frame


def _group_by_frame(frame: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """Order rows by frame, then by decreasing score."""
    by_score = torch.argsort(score, descending=True)
    return by_score[torch.argsort(frame[by_score], stable=True)]


class Postprocessor:
    """Decodes one detector output format into the detections tensor.

    Safe to call from several threads at once (on different outputs): its
    only state is caches that are replaced whole, never changed in place.
    """

    def __init__(self, fmt: OutputFormat, config: PostprocessOptions, device: torch.device) -> None:
        self.format = fmt
        self.config = config
        self.device = device
        self._geometry: tuple[tuple[LetterboxGeometry, ...], torch.Tensor] = (
            (),
            torch.empty((0, 5), device=device),
        )
        self._allowed: dict[int, torch.Tensor] = {}

    def _geometry_tensor(self, geometries: Sequence[LetterboxGeometry]) -> torch.Tensor:
        """Per frame (pad_x, pad_y, gain, width, height), rebuilt only when frames change size."""
        key = tuple(geometries)
        cached_key, cached = self._geometry
        if key == cached_key:
            return cached
        rows = [(g.box_pad_x, g.box_pad_y, g.gain, g.source_width, g.source_height) for g in key]
        tensor = upload(torch.tensor(rows, dtype=torch.float32), self.device)
        self._geometry = (key, tensor)
        return tensor

    def _class_allowed(self, class_id: torch.Tensor, classes: int | None) -> torch.Tensor:
        """Whether each class id is one of ``config.classes``, by a lookup (no sync)."""
        wanted = self.config.classes or []
        size = max([*wanted, (classes or 1) - 1]) + 1
        table = self._allowed.get(size)
        if table is None:
            host = torch.zeros(size, dtype=torch.bool)
            host[list(wanted)] = True
            table = upload(host, self.device)
            self._allowed = {**self._allowed, size: table}
        inside = (class_id >= 0) & (class_id < size)
        return table[class_id.clamp(0, size - 1)] & inside

    def _candidates(
        self, output: torch.Tensor, classes: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Boxes (xyxy, input pixels), scores, class ids and frame positions above ``conf``.

        At most ``max_candidates`` per frame, the best ones; rows come grouped
        by frame.
        """
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
        if self.config.classes is not None:
            keep &= self._class_allowed(class_id, classes)
        if score.shape[1] > self.config.max_candidates:
            # The best max_candidates of each frame, a fixed number: no host wait.
            masked = torch.where(keep, score, torch.full_like(score, -torch.inf))
            score, anchor = masked.topk(self.config.max_candidates, dim=1)
            keep = torch.gather(keep, 1, anchor)
            class_id = torch.gather(class_id, 1, anchor)
            boxes = torch.gather(boxes, 1, anchor[..., None].expand(-1, -1, 4))
        transfers.implicit_sync("candidates")  # nonzero: the number of candidates
        frame, index = keep.nonzero(as_tuple=True)
        boxes = boxes[frame, index].float()
        if self.format is not OutputFormat.END_TO_END:
            boxes = cxcywh_to_xyxy(boxes)
        return boxes, score[frame, index].float(), class_id[frame, index], frame

    def __call__(
        self, output: torch.Tensor, geometries: Sequence[LetterboxGeometry]
    ) -> torch.Tensor:
        """Detections for the first ``len(geometries)`` frames of ``output``.

        Returns a float32 tensor of shape ``(M, 7)`` with columns
        :data:`DETECTION_COLUMNS`, grouped by frame, highest score first.
        """
        shape = tuple(output.shape)
        check_output_shape(self.format, shape)
        classes = class_count(self.format, shape)
        boxes, score, class_id, frame = self._candidates(output[: len(geometries)], classes)
        if self.format is OutputFormat.END_TO_END:
            order = _group_by_frame(frame, score)
        else:
            kept = batched_nms(boxes, score, frame * (classes or 1) + class_id, self.config.iou)
            order = kept[torch.argsort(frame[kept], stable=True)]  # NMS gives decreasing score
        frame = frame[order]
        if frame.numel() > self.config.max_det:  # only then can a frame hold more than max_det
            transfers.implicit_sync("max_det")  # nonzero: how many rows survive the cap
            survivors = (_rank_within_frame(frame) < self.config.max_det).nonzero()[:, 0]
            order, frame = order[survivors], frame[survivors]
        boxes, score, class_id = boxes[order], score[order], class_id[order]

        geometry = self._geometry_tensor(geometries)[frame]
        pad = geometry[:, 0:2].repeat(1, 2)
        boxes = (boxes - pad) / geometry[:, 2:3]
        limits = geometry[:, 3:5].repeat(1, 2)
        boxes = torch.minimum(boxes.clamp_(min=0.0), limits)
        return torch.cat(
            [frame[:, None].float(), boxes, score[:, None], class_id[:, None].float()], dim=1
        )
