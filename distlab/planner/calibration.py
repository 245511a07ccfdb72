"""How far to trust a predicted MFU: the band the planner's errors on published runs put around it.

Every page that quotes a planner MFU quotes `mfu_band(mfu)` beside it. The band is the corpus's error range
(chapter 13, distlab/data/published_runs.toml): a prediction p whose published runs came out between
p / (1 + e_max) and p / (1 + e_min) for the model's signed relative errors e = predicted / published - 1.

Until the corpus validation is in place the band is Narayanan et al. 2021 Table 1's error range (chapter 13's
first comparison), which is narrower than the truth on other sources: treat it as a lower bound on the doubt.
"""

from __future__ import annotations


def error_range() -> tuple[float, float]:
    """(e_min, e_max): the smallest and largest signed relative error of the planner on published runs."""
    from distlab.planner.planner_validation import predict, rows

    errors = [predict(row)["error"] for row in rows().values()]
    return min(errors), max(errors)


def mfu_band(mfu: float) -> tuple[float, float]:
    """(low, high): the MFU a run predicted at `mfu` would reach, given the planner's errors on published runs."""
    e_min, e_max = error_range()
    return mfu / (1 + e_max), mfu / (1 + e_min)
