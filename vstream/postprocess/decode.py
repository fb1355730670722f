"""Turning raw detector output into final boxes, on the device, with as few host waits as possible.

Each family's outputs (:mod:`vstream.postprocess.formats`) are first read
into the same dense form: per frame and row a box in input pixels, a score
and a class. Candidates are then filtered by confidence and class,
suppressed with torchvision's NMS kernel (:mod:`vstream.postprocess.nms`)
where the family needs it (NMS-free models are cut to their best
``max_det`` rows per frame by a ``topk`` instead), capped per frame and
mapped back to the pixels of each original frame, through the letterbox or
the stretch (separate x and y gains). The result is one
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

import collections
from collections.abc import Sequence

import numpy as np
import torch

from vstream.config.model import PostprocessOptions
from vstream.errors import ModelError
from vstream.postprocess.formats import (
    FAMILIES,
    STRIDES,
    OutputFormat,
    check_output_shape,
    class_count,
)
from vstream.postprocess.nms import batched_nms, cxcywh_to_xyxy, rotated_nms
from vstream.postprocess.tasks import DETECTION, Task, TaskSpec
from vstream.preprocess.letterbox import LetterboxGeometry
from vstream.transfer import transfers, upload

DETECTION_COLUMNS = ("frame", "x1", "y1", "x2", "y2", "score", "class_id")
"""Columns of the detections tensor; ``frame`` is the position in the batch."""

NMS_ROUNDS = 8
"""Rounds of :class:`FixedShapes`' suppression: settles chains of up to eight boxes, each
suppressed by the one before it; a frame not settled by then is done again exactly."""

MIN_WINDOW = 64
"""Fewest candidates per frame :class:`FixedShapes` examines."""

MIN_ROWS = 16
"""Fewest detections per frame :class:`FixedShapes` copies to the host."""

WINDOW_MEMORY = 64
"""Batches whose candidate counts :class:`FixedShapes` sizes its window by."""


def _rank_within_frame(frame: torch.Tensor) -> torch.Tensor:
    """Position of each row among the rows of its frame; ``frame`` must be sorted."""
    first_of_frame = torch.searchsorted(frame, frame)
    return torch.arange(frame.numel(), device=frame.device) - first_of_frame


def _group_by_frame(frame: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """Order rows by frame, then by decreasing score."""
    by_score = torch.argsort(score, descending=True)
    return by_score[torch.argsort(frame[by_score], stable=True)]


class Postprocessor:
    """Decodes one detector family's outputs into the detections tensor.

    ``input_size`` ``(height, width)`` scales normalised boxes to input pixels
    and sizes YOLOX's grid. Safe to call from several threads at once (on
    different outputs): its only state is caches that are replaced whole,
    never changed in place.
    """

    def __init__(
        self,
        fmt: OutputFormat,
        config: PostprocessOptions,
        device: torch.device,
        input_size: tuple[int, int] = (640, 640),
        order: Sequence[int] = (0,),
        task: TaskSpec = DETECTION,
        no_object: bool = False,
    ) -> None:
        self.format = fmt
        self.task = task
        """What the boxes carry besides classes; its values per box are not class scores."""
        self.no_object = no_object
        """``detr``: the logits end with a no-object class (softmax scores, see ``_detr``)."""
        shaped = task.task in (Task.POSE, Task.OBB)
        if shaped and fmt not in (OutputFormat.YOLOV8, OutputFormat.END_TO_END):
            raise ModelError(
                f"a {task.task.value} model must have the yolov8 or the end2end layout, "
                f"not {fmt.value}"
            )
        self.family = FAMILIES[fmt]
        self.config = config
        self.device = device
        self.order = tuple(order)
        """Model output positions in the order this family's decoding takes them."""
        height, width = input_size
        self._input_scale = upload(
            torch.tensor([width, height, width, height], dtype=torch.float32), device
        )
        self._geometry: tuple[tuple[LetterboxGeometry, ...], torch.Tensor] = (
            (),
            torch.empty((0, 6), device=device),
        )
        self._allowed: dict[int, torch.Tensor] = {}
        self._grid = _yolox_grid(input_size, device) if fmt is OutputFormat.YOLOX else None

    def _geometry_tensor(self, geometries: Sequence[LetterboxGeometry]) -> torch.Tensor:
        """Per frame (pad_x, pad_y, gain_x, gain_y, width, height), rebuilt when frames change."""
        key = tuple(geometries)
        cached_key, cached = self._geometry
        if key == cached_key:
            return cached
        rows = [
            (g.box_pad_x, g.box_pad_y, g.gain_x, g.gain_y, g.source_width, g.source_height)
            for g in key
        ]
        tensor = upload(torch.tensor(rows, dtype=torch.float32), self.device)
        self._geometry = (key, tensor)
        return tensor

    @property
    def candidate_limit(self) -> int:
        """Most candidates a frame hands on: ``max_candidates`` to NMS, else ``max_det``."""
        return self.config.max_candidates if self.family.nms else self.config.max_det

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

    def _rows(
        self, outputs: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Boxes, scores and class ids (:meth:`_dense`) and what a pose or OBB model adds
        after them, ``[B, N, extra]`` (keypoint values or the angle; none for other tasks)."""
        boxes, score, class_id = self._dense(outputs)
        if self.task.task not in (Task.POSE, Task.OBB):
            return boxes, score, class_id, boxes[..., :0]
        first = outputs[0]
        rows = first.transpose(1, 2) if self.format is OutputFormat.YOLOV8 else first
        return boxes, score, class_id, rows[..., rows.shape[-1] - self.task.extra :]

    def _dense(
        self, outputs: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Boxes ``[B, N, 4]`` (the family's layout), scores and class ids ``[B, N]``."""
        fmt, first = self.format, outputs[0]
        if fmt in (OutputFormat.END_TO_END, OutputFormat.RTDETR_TOPK):
            return first[..., :4], first[..., 4], first[..., 5].round().long()
        if fmt is OutputFormat.DETR_SIZED:
            labels, boxes, scores = outputs
            return boxes, scores, labels.long()
        if fmt is OutputFormat.DETR:
            return self._detr(outputs[0], outputs[1])
        if fmt is OutputFormat.YOLO_NAS:
            score, class_id = outputs[1].max(dim=-1)
            return outputs[0], score, class_id
        rows = first.transpose(1, 2) if fmt is OutputFormat.YOLOV8 else first
        end = rows.shape[-1] - self.task.extra  # the task's values per box follow the classes
        if fmt in (OutputFormat.YOLOV8, OutputFormat.RTDETR):
            score, class_id = rows[..., 4:end].max(dim=-1)
        else:
            score, class_id = (rows[..., 5:end] * rows[..., 4:5]).max(dim=-1)
        return rows[..., :4], score, class_id

    def _detr(
        self, boxes: torch.Tensor, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A DETR's queries as transformers' ``post_process_object_detection`` reads them.

        With a no-object class (DETR): the softmax over every column, the best real class
        per query. Else (RT-DETR, D-FINE, RF-DETR): the best ``candidate_limit`` (``max_det``)
        of queries x classes, so one query may give boxes of two classes; the sigmoid is
        taken after the ``topk`` (it keeps the order), on K values, not Q x nc.
        """
        if self.no_object:
            score, class_id = logits.softmax(dim=-1)[..., :-1].max(dim=-1)
            return boxes, score, class_id
        classes = logits.shape[-1]
        flat = logits.flatten(1)
        if self.config.classes is not None:  # before the top-k: the wanted classes fill it
            column = torch.arange(classes, device=logits.device)
            wanted = self._class_allowed(column, classes).repeat(logits.shape[1])
            flat = flat.masked_fill(~wanted, -torch.inf)
        top, index = flat.topk(min(self.candidate_limit, flat.shape[1]), dim=1)
        query = index // classes
        boxes = torch.gather(boxes, 1, query[..., None].expand(-1, -1, boxes.shape[-1]))
        return boxes, top.sigmoid(), index % classes

    def wanted(
        self,
        boxes: torch.Tensor,
        score: torch.Tensor,
        class_id: torch.Tensor,
        classes: int | None,
        extra: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Which rows are candidates: scored above ``conf``, of a class kept, and finite, with
        the task's ``extra`` values (:meth:`_rows`) where given. A box at infinity (an fp16
        model's overflow) would be clipped to a line along the frame's edge and pass for a
        detection; a NaN or infinite score ranks nothing. A non-finite OBB angle makes the
        whole rotated box NaN, which suppresses nothing and reaches the tracker and the
        records. A pose row with a non-finite keypoint is dropped whole too, not mended: the
        row came out of the same overflowing head, and a keypoint without a score (``D``
        2) has no way to say it is missing; readers of keypoints can count on numbers."""
        keep = (score > self.config.conf) & torch.isfinite(score) & torch.isfinite(boxes).all(-1)
        if extra is not None:
            keep &= torch.isfinite(extra).all(-1)
        if self.config.classes is not None:
            keep &= self._class_allowed(class_id, classes)
        return keep

    def _candidates(
        self, outputs: Sequence[torch.Tensor], classes: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Boxes (input pixels: xyxy, an OBB's cx cy w h), scores, class ids, frame positions,
        the task's extra channels (a pose or OBB model's) and rows of the model output
        (anchors) of the candidates above ``conf``.

        At most ``max_candidates`` per frame (``max_det`` for NMS-free
        families), the best ones; rows come grouped by frame.
        """
        boxes, score, class_id, extra = self._rows(outputs)
        keep = self.wanted(boxes, score, class_id, classes, extra)
        limit = self.candidate_limit
        anchor = None
        if score.shape[1] > limit:
            # The best rows of each frame, a fixed number: no host wait.
            masked = torch.where(keep, score, torch.full_like(score, -torch.inf))
            score, anchor = masked.topk(limit, dim=1)
            keep = torch.gather(keep, 1, anchor)
            class_id = torch.gather(class_id, 1, anchor)
            boxes = torch.gather(boxes, 1, anchor[..., None].expand(-1, -1, 4))
            extra = torch.gather(extra, 1, anchor[..., None].expand(-1, -1, extra.shape[-1]))
        transfers.implicit_sync("candidates")  # nonzero: the number of candidates
        frame, index = keep.nonzero(as_tuple=True)
        rows = index if anchor is None else anchor[frame, index]
        boxes, extra = boxes[frame, index].float(), extra[frame, index].float()
        if self.task.task is not Task.OBB:  # an OBB's cx cy w h stay as they are
            boxes = self.input_boxes(boxes, rows)
        return boxes, score[frame, index].float(), class_id[frame, index], frame, extra, rows

    def input_boxes(self, boxes: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """Boxes in the family's layout as xyxy in input pixels; ``anchor`` is each box's row
        of the model output (YOLOX's grid cell). Any leading shape."""
        if self._grid is not None:
            boxes = _yolox_decode(boxes, self._grid[anchor])
        if self.family.box == "cxcywh":
            boxes = cxcywh_to_xyxy(boxes)
        if self.family.normalised:
            boxes = boxes * self._input_scale
        return boxes

    def ordered(
        self, outputs: torch.Tensor | Sequence[torch.Tensor], frames: int
    ) -> tuple[list[torch.Tensor], int | None]:
        """The outputs of the first ``frames`` frames in this family's order, checked, and the
        number of classes they hold (None where the layout does not say)."""
        given = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        ordered = [given[i][:frames] for i in self.order]
        shapes = [self.task.detection_shape(tuple(given[i].shape)) for i in self.order]
        if self.family.outputs == 1:
            check_output_shape(self.format, shapes[0])
        return ordered, class_count(self.format, shapes, self.no_object)

    def __call__(
        self,
        outputs: torch.Tensor | Sequence[torch.Tensor],
        geometries: Sequence[LetterboxGeometry],
    ) -> torch.Tensor:
        """Detections for the first ``len(geometries)`` frames of the model's ``outputs``.

        ``outputs`` are the model's outputs in its own order (or its one
        output). Returns a float32 tensor of shape ``(M, 7)`` with columns
        :data:`DETECTION_COLUMNS`, grouped by frame, highest score first; a pose
        model's rows go on with their ``K x D`` keypoint values, an OBB model's with
        ``cx, cy, w, h, angle`` (its box columns then hold the box around it), all in
        frame pixels.
        """
        return self.decode(outputs, geometries)[0]

    def decode(
        self,
        outputs: torch.Tensor | Sequence[torch.Tensor],
        geometries: Sequence[LetterboxGeometry],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The detections of :meth:`__call__` and, for each, its row of the model output (what
        a task reads its values per box from: :meth:`task_values`)."""
        ordered, classes = self.ordered(outputs, len(geometries))
        boxes, score, class_id, frame, extra, rows = self._candidates(ordered, classes)
        obb = self.task.task is Task.OBB
        if obb:  # (cx, cy, w, h, angle) in input pixels
            boxes = torch.cat([boxes, extra], dim=1)
            extra = extra[:, :0]
        if not self.family.nms:
            order = _group_by_frame(frame, score)
        else:
            per_frame = classes or 1
            groups = frame * per_frame + class_id  # a box suppresses only boxes of its group
            if obb:
                kept = rotated_nms(boxes, score, groups, self.config.iou)
            else:
                count = len(geometries) * per_frame
                kept = batched_nms(boxes, score, groups, self.config.iou, count)
            order = kept[torch.argsort(frame[kept], stable=True)]  # NMS gives decreasing score
        frame = frame[order]
        if frame.numel() > self.config.max_det:  # only then can a frame hold more than max_det
            transfers.implicit_sync("max_det")  # nonzero: how many rows survive the cap
            survivors = (_rank_within_frame(frame) < self.config.max_det).nonzero()[:, 0]
            order, frame = order[survivors], frame[survivors]
        boxes, score, class_id, extra = boxes[order], score[order], class_id[order], extra[order]

        geometry = self._geometry_tensor(geometries)[frame]
        if obb:
            extra = _rotated_to_frame_pixels(boxes, geometry)
            boxes = _to_frame_pixels(_rotated_hull(boxes), geometry)
        else:
            boxes = _to_frame_pixels(boxes, geometry)
        if self.task.keypoints is not None:
            extra = _keypoints_to_frame_pixels(extra, self.task.keypoints, geometry)
        detections = torch.cat(
            [frame[:, None].float(), boxes, score[:, None], class_id[:, None].float(), extra], dim=1
        )
        return detections, rows[order]

    def task_values(
        self,
        outputs: torch.Tensor | Sequence[torch.Tensor],
        frame: torch.Tensor,
        rows: torch.Tensor,
    ) -> torch.Tensor:
        """``(K, extra)``: the task's values (mask coefficients...) of the detections at batch
        positions ``frame`` and model output ``rows``, in the output's own layout."""
        first = outputs[self.order[0]] if not isinstance(outputs, torch.Tensor) else outputs
        rows_first = first.transpose(1, 2) if self.format is OutputFormat.YOLOV8 else first
        return rows_first[frame, rows, rows_first.shape[-1] - self.task.extra :]


class FixedShapes:
    """The postprocess of a batch in shapes fixed before the run: no host wait until its copy.

    On CUDA every data-dependent size (``nonzero``, torchvision's NMS keeping
    boxes by a mask) makes the host wait for the stream. Here every frame
    instead keeps its best ``window`` candidates (a ``topk``), suppresses them
    against each other in a ``window x window`` matrix, and writes at most
    ``min(max_det, window, rows)`` rows into a tensor of a fixed shape, led by
    a header row per frame: ``[count, exact, candidates, kept]``. That tensor
    is the batch's one copy to the host and its one wait
    (:func:`vstream.transfer.to_host`); the host cuts the rows by the counts.

    **Exact, or done again.** Greedy NMS keeps a box unless a better kept box
    of its class overlaps it by more than ``iou``: with the candidates sorted,
    ``kept = valid & ~any(kept_j & suppresses_ji, j < i)``. That recursion has
    one solution, reached by iterating from "all kept" (each round settles at
    least one more box of every chain of suppressions; at a tracker's low
    ``conf`` the demo detector's chains reach five or six). After
    :data:`NMS_ROUNDS` rounds a frame whose last round changed nothing holds
    exactly torchvision's answer. A frame that had more
    candidates than the window, or whose rounds had not settled, says so in
    its header, and the batch is postprocessed again by the exact path
    (:class:`Postprocessor`'s, one more host wait, counted as ``window``);
    so does a frame that kept more boxes than the rows copied. The window
    and the rows follow what the scenes need (the next power of two of the
    most candidates, and kept boxes, a frame had in the last
    :data:`WINDOW_MEMORY` batches, from :data:`MIN_WINDOW` and
    :data:`MIN_ROWS`), so the matrix and the copy stay small (a few hundred
    bytes per frame) and a grown scene costs one batch done twice.

    On a CPU nothing waits, and the exact path's NMS costs less than the
    matrix, so there the detector keeps the exact path; this one runs on a
    CPU only where asked (tests, the host-overhead benchmark).
    """

    def __init__(self, post: Postprocessor) -> None:
        self.post = post
        self.window = MIN_WINDOW
        """Candidates per frame the next batch examines; grows and shrinks with the scenes."""
        self.rows = MIN_ROWS
        """Detections per frame the next batch copies to the host (at most ``max_det``)."""
        self._seen: collections.deque[tuple[int, int]] = collections.deque(maxlen=WINDOW_MEMORY)
        """The most candidates and kept boxes a frame had, in each of the last batches."""

    def _window_for(self, anchors: int) -> int:
        return max(1, min(self.window, anchors, self.post.candidate_limit))

    def _complete(self, anchors: int, window: int) -> bool:
        """Whether ``window`` candidates per frame are all the exact path would take."""
        return window >= min(anchors, self.post.candidate_limit)

    def __call__(
        self,
        outputs: torch.Tensor | Sequence[torch.Tensor],
        geometries: Sequence[LetterboxGeometry],
    ) -> torch.Tensor:
        """``(frames, 1 + rows, 6)`` float32: per frame a header row, then its detections
        (``x1, y1, x2, y2, score, class_id`` in the frame's pixels, best first)."""
        post = self.post
        ordered, classes = post.ordered(outputs, len(geometries))
        boxes, score, class_id = post._dense(ordered)
        frames, anchors = score.shape
        keep = post.wanted(boxes, score, class_id, classes)
        window = self._window_for(anchors)
        masked = torch.where(keep, score, torch.full_like(score, -torch.inf))
        score, anchor = masked.topk(window, dim=1)
        valid = torch.gather(keep, 1, anchor)
        class_id = torch.gather(class_id, 1, anchor)
        boxes = torch.gather(boxes, 1, anchor[..., None].expand(-1, -1, boxes.shape[-1])).float()
        boxes = post.input_boxes(boxes, anchor)
        settled = torch.ones(frames, dtype=torch.bool, device=boxes.device)
        if post.family.nms:
            valid, settled = _suppress(boxes, class_id, valid, post.config.iou)
        boxes = _to_frame_pixels(boxes, post._geometry_tensor(geometries)[:, None, :])
        found = torch.cat([boxes, score[..., None].float(), class_id[..., None].float()], dim=2)
        max_det = post.config.max_det
        rows = min(max_det, window, self.rows)
        # The kept rows first, in their order (best first): a stable sort of "not kept".
        first = torch.sort((~valid).to(torch.uint8), dim=1, stable=True).indices[:, :rows]
        found = torch.gather(found, 1, first[..., None].expand(-1, -1, found.shape[-1]))
        candidates, kept = keep.sum(1), valid.sum(1)
        exact = settled if self._complete(anchors, window) else settled & (candidates <= window)
        if rows < min(max_det, window):  # a frame keeping more than the rows copied is redone
            exact = exact & (kept <= rows)
        header = torch.stack([kept.clamp(max=rows), exact, candidates, kept], dim=1)
        header = torch.nn.functional.pad(header.float(), (0, found.shape[-1] - header.shape[1]))
        return torch.cat([header[:, None, :], found], dim=1)

    def unpack(self, host: np.ndarray) -> np.ndarray | None:
        """The batch's rows as the exact path gives them (``frame, x1, ..., class_id``), or
        None if a frame was not exact (then the window grows for the next batches)."""
        header = host[:, 0]
        candidates, kept = (int(header[:, i].max()) if len(header) else 0 for i in (2, 3))
        self._seen.append((candidates, kept))
        self.window = _fitting(max(c for c, _ in self._seen), MIN_WINDOW)
        self.rows = _fitting(max(k for _, k in self._seen), MIN_ROWS)
        if not header[:, 1].all():
            return None
        counts = header[:, 0].astype(np.int64)
        mask = np.arange(host.shape[1] - 1)[None, :] < counts[:, None]
        frame = np.broadcast_to(np.arange(len(host), dtype=np.float32)[:, None], mask.shape)
        return np.concatenate([frame[mask][:, None], host[:, 1:][mask]], axis=1)


def _to_frame_pixels(boxes: torch.Tensor, geometry: torch.Tensor) -> torch.Tensor:
    """Boxes in input pixels mapped back through the letterbox or stretch into their frames'
    pixels and clipped to the frame; ``geometry`` rows (pad x, pad y, gain x, gain y, width,
    height) broadcast against the boxes."""
    boxes = (boxes - geometry[..., 0:2].tile(2)) / geometry[..., 2:4].tile(2)
    return torch.minimum(boxes.clamp_(min=0.0), geometry[..., 4:6].tile(2))


def _rotated_hull(rotated: torch.Tensor) -> torch.Tensor:
    """The axis-aligned ``x1, y1, x2, y2`` around ``(cx, cy, w, h, angle)`` rows."""
    cos, sin = rotated[:, 4].cos().abs(), rotated[:, 4].sin().abs()
    half_w, half_h = rotated[:, 2] / 2, rotated[:, 3] / 2
    reach = torch.stack([half_w * cos + half_h * sin, half_w * sin + half_h * cos], dim=1)
    return torch.cat([rotated[:, 0:2] - reach, rotated[:, 0:2] + reach], dim=1)


def _rotated_to_frame_pixels(rotated: torch.Tensor, geometry: torch.Tensor) -> torch.Tensor:
    """``(cx, cy, w, h, angle)`` rows in input pixels mapped into their frames' pixels as the
    reference maps them: the centre back through the letterbox, ``w`` divided by the x gain
    and ``h`` by the y gain, nothing clipped (a rotated box may reach past the frame)."""
    centre = (rotated[:, 0:2] - geometry[:, 0:2]) / geometry[:, 2:4]
    return torch.cat([centre, rotated[:, 2:4] / geometry[:, 2:4], rotated[:, 4:5]], dim=1)


def _keypoints_to_frame_pixels(
    values: torch.Tensor, shape: tuple[int, int], geometry: torch.Tensor
) -> torch.Tensor:
    """Rows of ``K x D`` keypoint values (``x, y`` in input pixels, then a score where ``D`` is
    3) with ``x, y`` mapped into their frames' pixels and clipped to the frame, as boxes are."""
    points = values.reshape(len(values), *shape).clone()
    xy = (points[..., 0:2] - geometry[:, None, 0:2]) / geometry[:, None, 2:4]
    points[..., 0:2] = torch.minimum(xy.clamp(min=0.0), geometry[:, None, 4:6])
    return points.reshape(values.shape)


def _fitting(count: int, least: int) -> int:
    """The power of two that holds ``count``, at least ``least``."""
    return max(least, 1 << max(0, count - 1).bit_length())


def _suppress(
    boxes: torch.Tensor, class_id: torch.Tensor, valid: torch.Tensor, iou: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy NMS of each frame's candidates, sorted best first, in fixed shapes.

    Returns which boxes are kept and, per frame, whether the rounds settled.
    The overlap is torchvision's arithmetic (``inter / (area_i + area_j - inter)``,
    suppressing above ``iou``).
    """
    # Every torch operation here is a dispatch, and on a GPU a chance for the thread to wait
    # for the GIL: the pairs are taken on all four coordinates at once, and the rounds keep
    # ``kept`` as the (frames, 1, window) 0/1 row the product takes.
    rows, cols = boxes[:, :, None, :], boxes[:, None, :, :]
    near = torch.maximum(rows[..., :2], cols[..., :2])
    sides = (torch.minimum(rows[..., 2:], cols[..., 2:]) - near).clamp_(min=0)
    inter = sides[..., 0] * sides[..., 1]
    extent = boxes[..., 2:] - boxes[..., :2]
    area = extent[..., 0] * extent[..., 1]
    overlap = inter / (area[:, :, None] + area[:, None, :] - inter)
    window = boxes.shape[1]
    earlier = torch.ones((window, window), dtype=torch.bool, device=boxes.device).triu_(1)
    # suppresses[b, j, i]: box j, better than box i, of its class, overlaps it by more than iou
    suppresses = (overlap > iou) & earlier & (class_id[:, :, None] == class_id[:, None, :])
    suppresses = (suppresses & valid[:, :, None]).to(boxes.dtype)
    alive = valid[:, None, :].to(boxes.dtype)
    kept = alive
    for _ in range(NMS_ROUNDS):  # the counts of kept boxes suppressing each box: exact sums
        before = kept
        kept = alive * (torch.bmm(kept, suppresses) == 0)
    return kept[:, 0] > 0, (kept == before).all(2)[:, 0]


def _yolox_grid(input_size: tuple[int, int], device: torch.device) -> torch.Tensor:
    """Per row of a YOLOX raw output: (cell x, cell y, stride), strides 8, 16, 32 in order."""
    rows = []
    for stride in STRIDES:
        ys, xs = torch.meshgrid(
            torch.arange(input_size[0] // stride),
            torch.arange(input_size[1] // stride),
            indexing="ij",
        )
        cells = torch.stack([xs.flatten(), ys.flatten()], dim=1).float()
        rows.append(torch.cat([cells, torch.full((len(cells), 1), float(stride))], dim=1))
    return upload(torch.cat(rows), device)


def _yolox_decode(raw: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """YOLOX's raw (tx, ty, tw, th) as cx, cy, w, h in input pixels, as its demo decodes them."""
    stride = grid[..., 2:3]
    return torch.cat(
        [(raw[..., :2] + grid[..., :2]) * stride, raw[..., 2:4].exp() * stride], dim=-1
    )
