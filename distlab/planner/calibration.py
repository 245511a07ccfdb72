"""How far to trust a predicted MFU: the band the planner's errors on published runs put around it.

Every page that quotes a planner MFU quotes `mfu_band(mfu)` beside it. The band is the corpus's error range
(chapter 13, distlab.planner.planner_validation over distlab/data/published_runs.toml): a prediction p whose
published runs came out between p / (1 + e_max) and p / (1 + e_min), for the smallest and largest signed
errors e = predicted / published - 1 of the runs inside the model's claims.

Running the whole validation takes seconds, too slow for `distlab plan`; the two errors are therefore kept in
distlab/data/planner.toml (entry mfu-band), and the planner-validation experiment claims that they equal what
the corpus gives, so a change to the cost model that moves them fails the build until the entry follows.
"""

from __future__ import annotations

from distlab.core.facts import value


def stored_error_range() -> tuple[float, float]:
    """(e_min, e_max) as stored for the CLI (checked against the corpus by the planner-validation experiment)."""
    return value("planner.mfu-band.error_min"), value("planner.mfu-band.error_max")


def mfu_band(mfu: float) -> tuple[float, float]:
    """(low, high): the MFU a run predicted at `mfu` would reach, given the planner's errors on published runs."""
    e_min, e_max = stored_error_range()
    return mfu / (1 + e_max), mfu / (1 + e_min)


def with_band(mfu: float) -> str:
    """An MFU as a table quotes it: the model's figure and its band, e.g. "60.0 % (50 %-70 %)"."""
    lo, hi = mfu_band(mfu)
    return f"{mfu:.1%} ({lo:.0%}-{hi:.0%})"


def within_band(mfu: float, best_mfu: float) -> bool:
    """Is a plan predicted at `mfu` as good as one predicted at `best_mfu`, as far as the planner can tell? Yes when
    the better prediction lies inside this plan's band (mfu / (1 + e_max) <= best_mfu <= mfu / (1 + e_min)): the
    corpus's errors could turn either ranking around. For a slower plan that is mfu >= best_mfu x (1 + e_min)."""
    lo, hi = mfu_band(mfu)
    return lo <= best_mfu <= hi or mfu >= best_mfu
