"""Chapter 10's DataLoader numbers worked by hand: L = per-sample transform x batch, the predicted step
L + C (main process) or max(C, L/w) (w workers) and its waiting share 1 − C/step, the bursty run's mean L, each
typed here from the experiment's printed inputs, never through distlab.throughput.dataloader_starvation's
predicted_step_s. The measured columns are timings (claimed there with margins, and noise to the guard audit).

Each function compares what the dataloader-starvation experiment put in its Result with these, as claims.
"""

from __future__ import annotations

import re

from distlab.core.results import Result


def _gap(pairs: list[tuple[float, float]]) -> float:
    return max(abs(a - b) for a, b in pairs)


def claims(r: Result, ax) -> None:
    q = {k: v.value for k, v in r.quantities.items()}
    sample, batch, c = q["sample_s"], q["batch"], q["step_s"]
    load = sample * batch  # 24 ms x 2 samples = 48 ms
    slow, total, factor = q["burst_slow_batches"], q["burst_batches"], q["burst_factor"]
    burst = sample / 2 * batch * ((total - slow) + factor * slow) / total
    pairs = [(q["load_s"], load), (q["workers_needed"], load / c), (q["burst_mean_load_s"], burst)]
    r.claim(
        "L, L/C and the bursty mean L by hand (largest gap)", max(abs(a / b - 1) for a, b in pairs), 0, abs_tol=1e-12
    )

    def step(w: int) -> float:
        if w == 0:
            return load + c  # loading and the step in series
        return c if w * c >= load else load / w  # w workers deliver a batch every L/w

    cells = []
    for row in r.tables["workers"].rows:
        w = int(row[0])
        pred = step(w)
        cells += [(float(row[2]), round(1e3 * pred, 1)), (float(row[4].rstrip(" %")), round(100 * (1 - c / pred)))]
        cells.append((float(row[6]), round(1e3 * (pred - c), 1)))  # the predicted wait: step - C
    cap = r.tables["workers"].caption
    found = re.search(r"L = (\d+) ms, C = (\d+) ms", cap)
    assert found is not None, cap
    cells += [(float(found.group(1)), round(1e3 * load)), (float(found.group(2)), round(1e3 * c))]
    r.claim("workers table: predicted step, share and wait, caption L and C, by hand", _gap(cells), 0.0, abs_tol=1e-9)
    drawn = []
    for line in ax.get_lines():
        if line.get_label().startswith("predicted"):
            drawn += [(y, 100 * (1 - c / step(int(x)))) for x, y in zip(line.get_xdata(), line.get_ydata())]
        elif line.get_label() == "w = L/C":
            drawn += [(x, load / c) for x in line.get_xdata()]
    drawn.append((len(drawn) - 2, len(r.tables["workers"].rows)))  # one predicted point per table row
    r.claim("waiting figure: predicted line and w = L/C mark by hand", _gap(drawn), 0.0, abs_tol=1e-9)
