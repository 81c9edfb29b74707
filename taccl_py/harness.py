"""What a benchmark's host side adds to the time of a collective the GPUs take.

One GPU per process (MPI, torchrun): the model's own launch overheads, nothing more. ``all_reduce_perf -g N`` has
one thread launch every GPU's kernel in turn; its host cost per collective can be taken two ways:

* added to every collective (``taccl --launch-offset``, a harness's ``launch_offset_us``): the host's launches and
  the GPUs' work in series;
* overlapped (:class:`OverlappedHost`): nccl-tests queues its iterations without waiting, so the host launches the
  next collective while the GPUs run this one, and an iteration takes the longer of the two. The host's part grows
  with the channels NCCL splits the collective over (:func:`taccl_py.runtime.nccl_channels`).

The overlapped form is what published runs show where they can tell: Together AI's ``-g 8`` H100 runs with NVLS
take, from 2 MB to 8 GB, the time DGX Cloud's one-GPU-per-process run takes (within 3 %), with no host cost added; below,
their times stay on a floor of 35-45 us that rises with the size (the channels) while the GPUs' time is well under it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["OverlappedHost"]


@dataclass(frozen=True)
class OverlappedHost:
    """A harness whose host cost per collective overlaps the GPUs' work: ``host_us + per_channel_us x channels``."""

    host_us: float
    per_channel_us: float = 0.0

    def __post_init__(self) -> None:
        for name, value in (("host_us", self.host_us), ("per_channel_us", self.per_channel_us)):
            if not (math.isfinite(value) and 0 <= value <= 1e6):
                raise ValueError(f"{name} must be a number of us in 0..1e6 (got {value!r})")

    def host_time_us(self, channels: int) -> float:
        """The host's time per collective split over ``channels`` channels."""
        return self.host_us + self.per_channel_us * max(channels, 1)

    def time_us(self, gpu_us: float, channels: int) -> float:
        """An iteration's time: the GPUs' ``gpu_us`` or the host's, the longer."""
        return max(gpu_us, self.host_time_us(channels))
