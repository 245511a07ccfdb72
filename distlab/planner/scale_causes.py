"""Which cost grows with N in the published weak-scaling series: three candidate causes, each tested on the rows.

A weak-scaling series keeps the work per GPU fixed, so the seconds its step gains from the first size to the last
(added = step_last - step_first, both from the published tokens/s per GPU) are what scale cost. Of those, the
planner already prices some (its collectives' latencies grow with the ring); the rest, `missed`, is what a cause
must explain. Each candidate cause says what `missed` must be proportional to, with one constant for every series:

- stragglers (chapter 10's order statistic, any per-rank jitter j): the step is the rest x (1 + j E[Z_(N)]), so
  missed / step_first = j (E[Z_(N2)] - E[Z_(N1)]) / (1 + j E[Z_(N1)]): the same for every series spanning the same N;
- latency (a ring step's fixed cost): each of a layer's collectives takes N - 1 steps, so missed is proportional to
  layers x micro-batches per step x (N2 - N1);
- bandwidth (a per-byte cost of the fabric at the larger size): missed is proportional to the bytes the collectives
  move per GPU, which for FSDP is a fixed number of bytes per parameter per micro-batch: params x micro-batches.

The cause the rows favour is the one whose ratio varies least across the series (coefficient of variation: standard
deviation / mean). Nothing is fitted: the ratios are read off the rows. Pure Python.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from distlab.planner.scale_costs import expected_max_standard_normal


@dataclass(frozen=True, kw_only=True)
class SeriesEnds:
    """A weak-scaling series' first and last run, as the corpus prints them."""

    gpus_first: int
    gpus_last: int
    tokens_per_s_per_gpu_first: float
    tokens_per_s_per_gpu_last: float
    tokens_per_gpu_per_step: float
    """Global batch x sequence / GPUs: the same at both ends (weak scaling)."""
    layers: int
    params_billion: float
    microbatches: float
    """Micro-batches per step (gradient accumulation): FSDP gathers and scatters each layer once per micro-batch."""
    planner_added_seconds: float = 0.0
    """What the planner's own predictions of the two runs add to the step (0: judge the published rows alone)."""

    @property
    def step_first_seconds(self) -> float:
        return self.tokens_per_gpu_per_step / self.tokens_per_s_per_gpu_first

    @property
    def added_seconds(self) -> float:
        """What the step gains from the first size to the last."""
        return self.tokens_per_gpu_per_step / self.tokens_per_s_per_gpu_last - self.step_first_seconds

    @property
    def missed_seconds(self) -> float:
        """What the step gains that the planner does not price."""
        return self.added_seconds - self.planner_added_seconds


def ratios(s: SeriesEnds) -> dict[str, float]:
    """missed over what each cause says it is proportional to."""
    return {
        "stragglers": s.missed_seconds / s.step_first_seconds,
        "latency": s.missed_seconds / (s.layers * s.microbatches * (s.gpus_last - s.gpus_first)),
        "bandwidth": s.missed_seconds / (s.params_billion * s.microbatches),
    }


def coefficient_of_variation(values: list[float]) -> float:
    """Population standard deviation over the mean: how far one constant is from explaining every series."""
    return statistics.pstdev(values) / statistics.fmean(values)


def jitter_for_loss(loss: float, default_ratio: float, n_first: int, n_last: int) -> float:
    """The per-rank jitter j at which a layout whose throughput per GPU already falls to `default_ratio` (last /
    first, stragglers off) loses `loss` in all from n_first to n_last ranks: solves
    default_ratio (1 + j E1) / (1 + j E2) = 1 - loss, i.e. j = (1 - q) / (q E2 - E1) with q = (1 - loss) /
    default_ratio. Infinite when no jitter reaches it (E[Z] grows too slowly)."""
    q = (1 - loss) / default_ratio
    e1, e2 = expected_max_standard_normal(n_first), expected_max_standard_normal(n_last)
    denominator = q * e2 - e1
    return (1 - q) / denominator if denominator > 0 else float("inf")
