"""All-reduce simulated step by step: ring (reduce-scatter, then all-gather), a binomial tree and the
naive reduce-to-one + broadcast, each really reducing N buffers and counting every byte each rank sends
and receives.

An algorithm is a *schedule*: a sequence of steps, each a set of messages (source, destination, element
range, reduce-or-copy) that travel at the same time. One model of the wire for all three (the
"single-port" model): in one step a rank sends at most one message and receives at most one, over a
full-duplex link of bandwidth beta, and a step costs alpha + (largest message of the step) / beta.

Chunking (ring): a buffer of L elements is cut into N contiguous chunks like `numpy.array_split` and
`torch.tensor_split`: the first L mod N chunks have ceil(L/N) elements, the rest floor(L/N). Rank r
sends every chunk but one in each phase, so it sends 2L - c[r+1] - c[r+2] elements: exactly 2(N-1)/N of
the buffer when N divides L, within two elements of it otherwise, and 2(N-1) buffers summed over ranks
in every case.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from distlab.core.cli import MAX_BYTES, MAX_GPUS, command, emit, parser, positive
from distlab.core.experiments import experiment
from distlab.core.formatting import format_quantity
from distlab.core.results import Result

MAX_RANKS = 16384  # the byte count is O(N^2) array work; 16k ranks take a few seconds


@dataclass(frozen=True)
class Step:
    """One step of a schedule: messages that travel at the same time."""

    phase: str
    """"reduce-scatter", "all-gather", "reduce" or "broadcast"."""
    src: np.ndarray
    """(M,) sending rank of each message."""
    dst: np.ndarray
    """(M,) receiving rank of each message."""
    lo: np.ndarray
    """(M,) first element of each message's range."""
    hi: np.ndarray
    """(M,) one past the last element."""
    reduce: bool
    """True: the receiver adds the message into its buffer; False: it overwrites that range."""


def chunk_offsets(elements: int, n: int) -> np.ndarray:
    """(n + 1,) chunk boundaries: the first `elements % n` chunks get one extra element."""
    sizes = np.full(n, elements // n, dtype=np.int64)
    sizes[: elements % n] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def ring_schedule(elements: int, n: int) -> Iterator[Step]:
    """Reduce-scatter: at step s rank r sends chunk (r - s) mod N to rank r + 1, which adds it in; after
    N - 1 steps rank r holds the full sum of chunk (r + 1) mod N. All-gather: at step s rank r forwards
    chunk (r + 1 - s) mod N, which the receiver copies. 2(N - 1) steps."""
    off = chunk_offsets(elements, n)
    src = np.arange(n)
    dst = (src + 1) % n
    for phase, first in (("reduce-scatter", 0), ("all-gather", 1)):
        for s in range(n - 1):
            chunk = (src + first - s) % n
            yield Step(phase, src, dst, off[chunk], off[chunk + 1], reduce=phase == "reduce-scatter")


def tree_schedule(elements: int, n: int) -> Iterator[Step]:
    """Binomial tree, not pipelined: at step k every rank r with r mod 2^(k+1) = 2^k sends its whole
    buffer to r - 2^k, which adds it in (rank 0 ends with the sum after ceil(log2 N) steps); the
    broadcast runs the same tree backwards. 2 ceil(log2 N) steps, whole buffers each."""
    distances = [2**k for k in range(math.ceil(math.log2(n)))] if n > 1 else []
    for phase, order in (("reduce", distances), ("broadcast", distances[::-1])):
        for d in order:
            parents = np.arange(0, n - d, 2 * d)  # ranks r = 0 mod 2d with a partner r + d < n
            children = parents + d
            src, dst = (children, parents) if phase == "reduce" else (parents, children)
            full = np.full(len(parents), elements, dtype=np.int64)
            yield Step(phase, src, dst, np.zeros_like(full), full, reduce=phase == "reduce")


def naive_schedule(elements: int, n: int) -> Iterator[Step]:
    """Every rank sends its buffer to rank 0, one per step (rank 0 has one receive port), then rank 0
    sends the sum to each rank in turn. 2(N - 1) steps; rank 0 moves (N - 1) buffers each way."""
    one = np.ones(1, dtype=np.int64)
    for r in range(1, n):
        yield Step("reduce", one * r, one * 0, one * 0, one * elements, reduce=True)
    for r in range(1, n):
        yield Step("broadcast", one * 0, one * r, one * 0, one * elements, reduce=False)


SCHEDULES = {"ring": ring_schedule, "tree": tree_schedule, "naive": naive_schedule}


def schedule(algorithm: str, elements: int, n: int) -> Iterator[Step]:
    if algorithm not in SCHEDULES:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(SCHEDULES)}")
    if n < 1 or elements < 0:
        raise ValueError(f"need ranks >= 1 and elements >= 0, got {n} and {elements}")
    return SCHEDULES[algorithm](elements, n)


def run_steps(out: list[np.ndarray], algorithm: str = "ring") -> Iterator[Step]:
    """Apply the schedule to `out` (one buffer per rank, changed in place) one step at a time, yielding each step
    once it has been applied. All messages of a step are read before any is applied, as if they were on the wire
    at once."""
    for step in schedule(algorithm, len(out[0]), len(out)):
        payloads = [out[s][lo:hi].copy() for s, lo, hi in zip(step.src, step.lo, step.hi)]
        for d, lo, hi, data in zip(step.dst, step.lo, step.hi, payloads):
            if step.reduce:
                out[d][lo:hi] += data
            else:
                out[d][lo:hi] = data
        yield step


def simulate(buffers: list[np.ndarray], algorithm: str = "ring") -> list[np.ndarray]:
    """Run the schedule on real buffers (one per rank, same shape) and return each rank's result."""
    out = [np.array(b, copy=True) for b in buffers]
    for _ in run_steps(out, algorithm):
        pass
    return out


def ring_contributions(ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """What the ring drawing shows, read off a real run of the schedule: one element per chunk, rank r's buffer
    holding 2^r, so after every step each element's set bits name the ranks whose gradients it sums.
    Returns (counts, received): counts (2N - 1, N ranks, N chunks) = ranks summed per chunk at the start and after
    each step; received (2N - 2, N ranks) = the chunk each rank received in each step."""
    if not 2 <= ranks <= 62:
        raise ValueError(f"need 2 <= ranks <= 62 (one bit per rank in an int64), got {ranks}")
    out = [np.full(ranks, 1 << r, dtype=np.int64) for r in range(ranks)]  # (N,) one element per chunk
    off = chunk_offsets(ranks, ranks)

    def popcounts() -> np.ndarray:
        return np.array([[int(x).bit_count() for x in buf] for buf in out])

    counts, received = [popcounts()], []
    for step in run_steps(out, "ring"):
        got = np.empty(ranks, dtype=np.int64)
        got[step.dst] = np.searchsorted(off, step.lo, side="right") - 1  # chunk index of each message
        received.append(got)
        counts.append(popcounts())
    return np.array(counts), np.array(received)


@dataclass(frozen=True)
class Traffic:
    """What a schedule puts on the wire, in bytes."""

    algorithm: str
    ranks: int
    buffer_bytes: int
    sent: list[int]
    """Bytes each rank sends, in rank order."""
    received: list[int]
    """Bytes each rank receives."""
    step_bytes: list[int]
    """Per step, the most bytes any one rank sends or receives (what the step's time depends on)."""

    @property
    def steps(self) -> int:
        return len(self.step_bytes)

    def seconds(self, latency_s: float, bandwidth_bytes_per_s: float) -> float:
        """Alpha-beta time: each step costs alpha + (its largest per-rank message) / beta."""
        return sum(latency_s + b / bandwidth_bytes_per_s for b in self.step_bytes)


def traffic(buffer_bytes: int, ranks: int, algorithm: str = "ring", element_bytes: int = 1) -> Traffic:
    """Count the bytes of every message of the schedule (no buffers needed, so any size works)."""
    if buffer_bytes % element_bytes:
        raise ValueError(f"{buffer_bytes} bytes is not a whole number of {element_bytes}-byte elements")
    if ranks > MAX_RANKS:
        raise ValueError(f"at most {MAX_RANKS} ranks (the count does O(ranks^2) work), got {ranks}")
    sent = np.zeros(ranks, dtype=np.int64)
    received = np.zeros(ranks, dtype=np.int64)
    step_bytes = []
    for step in schedule(algorithm, buffer_bytes // element_bytes, ranks):
        nbytes = (step.hi - step.lo) * element_bytes
        out = np.bincount(step.src, nbytes, minlength=ranks)
        into = np.bincount(step.dst, nbytes, minlength=ranks)
        sent += out.astype(np.int64)
        received += into.astype(np.int64)
        step_bytes.append(int(max(out.max(), into.max())))
    return Traffic(algorithm, ranks, buffer_bytes, sent.tolist(), received.tolist(), step_bytes)


def ring_bytes_per_rank(buffer_bytes: float, ranks: int) -> float:
    """The textbook figure: 2(N - 1)/N of the buffer, each way."""
    return 2 * (ranks - 1) / ranks * buffer_bytes


def ring_seconds(buffer_bytes: float, ranks: int, latency_s: float, bandwidth_bytes_per_s: float) -> float:
    """Closed form for a divisible buffer: 2(N - 1) (alpha + B / (N beta))."""
    return 2 * (ranks - 1) * (latency_s + buffer_bytes / ranks / bandwidth_bytes_per_s)


# ---------------------------------------------------------------- the experiment
CASES = [(2, 12), (3, 12), (3, 1000), (4, 997), (5, 3), (8, 1024), (7, 100)]  # (ranks, elements)
EXAMPLE_LATENCY_S = 5e-6  # illustrative alpha: a few microseconds per hop, typical of one GPU-to-GPU step
EXAMPLE_BANDWIDTH = 100e9  # illustrative beta: 100 GB/s per direction
EXAMPLE_BUFFER = 960_000_000  # bytes; divisible by 2, 3, 8 and 64, so every ring chunk is equal
GROWTH_RANKS = [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]


def _ring_sent_by_hand(elements: int, n: int) -> list[int]:
    """Hand-derived, not read off the schedule: chunk i holds L // N elements plus one if i < L mod N; rank r's
    reduce-scatter sends every chunk but (r + 1) mod N (the one it finishes), its all-gather every chunk but
    (r + 2) mod N (the one it receives last). Rank r receives what rank r - 1 sends."""
    size = [elements // n + (1 if i < elements % n else 0) for i in range(n)]
    return [2 * elements - size[(r + 1) % n] - size[(r + 2) % n] for r in range(n)]


def _ring_counts_by_hand(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hand-derived ring of N GPUs, one element per chunk: after k reduce-scatter steps GPU r's chunk c sums 1 + d
    GPUs when d = (r - c) mod N is between 1 and k, else 1; all-gather step j hands GPU r the finished chunk
    (r - j + 1) mod N. Received: reduce-scatter step s (from 0) brings GPU r chunk (r - 1 - s) mod N, all-gather
    step s chunk (r - s) mod N."""
    counts = np.ones((2 * n - 1, n, n), dtype=np.int64)
    for k in range(n):
        for g in range(n):
            for c in range(n):
                d = (g - c) % n
                counts[k, g, c] = 1 + d if 1 <= d <= k else 1
    for j in range(1, n):
        counts[n - 1 + j] = counts[n - 2 + j]
        for g in range(n):
            counts[n - 1 + j, g, (g - j + 1) % n] = n
    received = [[(g - 1 - s) % n for g in range(n)] for s in range(n - 1)]
    received += [[(g - s) % n for g in range(n)] for s in range(n - 1)]
    return counts, np.array(received)


@experiment(
    "ring-allreduce",
    "ring all-reduce simulated step by step: exact sums, 2(N-1)/N bytes per rank, vs tree and naive",
    kind="simulated",
)
def ring_allreduce(device: str) -> Result:
    r = Result("ring-allreduce")
    rng = np.random.default_rng(0)
    rows = []
    exact_err = spread = total_err = 0
    dev_max = by_hand_dev = 0.0
    misses = 0  # per-rank bytes or steps that differ from the hand-derived ring
    for n, elements in CASES:
        ints = [rng.integers(-1000, 1000, elements) for _ in range(n)]
        direct = np.sum(ints, axis=0)
        for alg in SCHEDULES:
            res = simulate(ints, alg)
            exact_err = max(exact_err, max(int(np.abs(x - direct).max()) for x in res))
            spread = max(spread, max(int(np.abs(x - res[0]).max()) for x in res))
        t = traffic(8 * elements, n, "ring", element_bytes=8)
        sent = _ring_sent_by_hand(elements, n)
        misses += sum(a != 8 * b for a, b in zip(t.sent, sent)) + (t.steps != 2 * (n - 1))
        misses += sum(a != 8 * b for a, b in zip(t.received, sent[-1:] + sent[:-1]))
        formula = ring_bytes_per_rank(t.buffer_bytes, n)
        dev = max(abs(b - formula) for b in t.sent + t.received)
        total_err = max(
            total_err,
            abs(sum(t.sent) - 2 * (n - 1) * t.buffer_bytes),
            abs(sum(t.received) - 2 * (n - 1) * t.buffer_bytes),
        )
        if elements % n == 0:
            r.claim(
                f"ring, N={n}, L={elements} (divisible): largest |per-rank bytes - 2(N-1)/N x buffer|, "
                "sent and received",
                dev,
                0,
                unit="B",
            )
        else:
            dev_max = max(dev_max, dev / 8)
            by_hand_dev = max(by_hand_dev, *(abs(b - 2 * (n - 1) * elements / n) for b in sent))
        rows.append(
            [
                n,
                elements,
                f"{elements % n} of {n} chunks one longer",
                t.buffer_bytes,
                min(t.sent),
                max(t.sent),
                f"{formula:,.2f}",
                t.steps,
            ]
        )
    r.table(
        "cases",
        [
            "ranks N",
            "elements L (int64)",
            "chunking",
            "buffer (B)",
            "min sent per rank (B)",
            "max sent per rank (B)",
            "2(N-1)/N x buffer (B)",
            "steps",
        ],
        rows,
        caption="Ring all-reduce on int64 buffers; received counts are the same figures shifted by one rank",
    )
    r.claim("ring, tree and naive results equal the direct sum (integer data)", exact_err, 0)
    r.claim("every rank ends with the same buffer", spread, 0)
    r.claim("every case: bytes sent (and received) by all ranks together - 2(N-1) x buffer", total_err, 0, unit="B")
    r.claim(
        "uneven chunks: per-rank bytes within 2 elements of 2(N-1)/N x buffer",
        dev_max,
        2.0,
        relation="<=",
        unit="elements",
        formula="|2L/N - c[r+1] - c[r+2]| < 2",
    )
    r.add("uneven_max_deviation_elements", dev_max, "elements", "largest per-rank deviation from 2(N-1)/N, uneven L")
    r.claim("every case: per-rank bytes and steps = by hand", misses, 0, formula="2L - c[r+1] - c[r+2]; 2(N-1)")
    r.claim("uneven: largest deviation = by hand", dev_max, by_hand_dev, rel_tol=1e-12, unit="elements")

    # Float32: the ring adds in a different order than a direct sum; bounded by (N-1) u sum|x|.
    n, elements = 8, 4099
    xs = [rng.standard_normal(elements).astype(np.float32) for _ in range(n)]
    exact = np.sum(np.asarray(xs, dtype=np.float64), axis=0)
    ring = simulate(xs, "ring")[0].astype(np.float64)
    bound = (n - 1) * np.finfo(np.float32).eps / 2 * np.sum(np.abs(np.asarray(xs, np.float64)), axis=0)
    ratio = float(np.max(np.abs(ring - exact) / bound))
    # by hand: chunk c starts on rank c and adds ranks c + 1, ..., c + N - 1 in turn, in float32
    ordered = np.empty(elements, dtype=np.float32)
    for c, idx in enumerate(np.array_split(np.arange(elements), n)):
        acc = xs[c][idx]
        for j in range(1, n):
            acc = acc + xs[(c + j) % n][idx]
        ordered[idx] = acc
    r.claim("float32 ring = ring order summed by hand (bitwise)", float(np.abs(ring - ordered).max()), 0.0)
    u = 2.0**-24  # float32's unit roundoff, as the page writes it
    by_hand = max(
        abs(float(ordered[i]) - math.fsum(float(x[i]) for x in xs))
        / ((n - 1) * u * math.fsum(abs(float(x[i])) for x in xs))
        for i in range(elements)
    )
    r.claim(
        "float32 ring sum: error / ((N-1) u sum|x|) (the recursive-summation bound)",
        ratio,
        1.0,
        relation="<=",
        formula="N=8, L=4099, u = 2^-24",
    )
    r.add("float32_error_over_bound", ratio, "", "worst float32 error as a fraction of its bound")
    r.add("float32_ranks", n, "ranks", "ranks of the float32 case")
    r.add("float32_elements", elements, "elements", "float32 elements per rank")
    r.claim("float32 error / bound = by hand (math.fsum)", ratio, by_hand, rel_tol=1e-9, formula=f"N={n}, L={elements}")

    _algorithms(r)
    _growth_figure(r)
    _ring_picture(r)
    _seven_b(r)
    return r


def _seven_b(r: Result) -> None:
    """A worked problem: the bf16 gradients of Llama 2 7B, ring all-reduced in one node and across nodes."""
    from distlab.hardware.links import per_direction_bytes_per_s
    from distlab.models.shapes import presets

    grad = 2 * presets()["7B"].params()  # bf16: 2 bytes per parameter
    nvlink = per_direction_bytes_per_s("NVLink4-H100")  # quoted both ways: distlab.hardware.links halves it
    ndr = per_direction_bytes_per_s("InfiniBand-NDR")  # quoted in bits per direction
    r.add("7b_grad_bytes", grad, "B", "Llama 2 7B gradients in bf16")
    for n, link, name in ((8, nvlink, "nvlink"), (64, ndr, "ndr")):
        t = traffic(grad - grad % n, n, "ring")
        r.add(f"7b_ring_{n}_bytes", max(t.sent), "B", f"7B, ring over {n}: bytes each GPU sends")
        r.add(f"7b_ring_{n}_{name}_s", max(t.sent) / link, "s", f"7B, ring over {n}: bandwidth term on {name}")
    r.add(
        "7b_64_over_8",
        r.quantities["7b_ring_64_ndr_s"].value / r.quantities["7b_ring_8_nvlink_s"].value,
        "",
        "7B: flat ring over 64 on NDR / ring over 8 on NVLink, bandwidth term",
    )
    # one ring per NIC: a DGX node has a NIC per GPU, so 8 rings leave each node at once, each carrying an eighth
    # of the buffer over its own port; per rank that is min(NVLink, 8 x NDR). The one-NIC node is the case above.
    nics = 8
    eight = min(nvlink, nics * ndr)
    r.add("eight_nic_bandwidth", eight, "B/s", "a flat ring's per-rank bandwidth with 8 NICs per node (8 rings)")
    r.add("7b_ring_64_eight_nics_s", max(t.sent) / eight, "s", "7B, flat ring over 64, 8 NICs per node")
    r.claim(
        "flat ring over 8 nodes: 8 NICs per node carry 8 rings, 8 times one port's time",
        r.quantities["7b_ring_64_ndr_s"].value / r.quantities["7b_ring_64_eight_nics_s"].value,
        nics,
        rel_tol=1e-12,
    )
    r.add("nvlink_per_direction", nvlink, "B/s", "NVLink 4 (H100), one direction")
    r.add("ndr_per_direction", ndr, "B/s", "InfiniBand NDR port, one direction")
    from distlab.core.facts import value
    from distlab.sharding.zero_checks import ndr_bytes_per_s

    r.claim(
        "InfiniBand NDR port, one direction = the QM9700 NDR switch manual's port rate (a second source)",
        ndr,
        ndr_bytes_per_s(),
        rel_tol=1e-12,
        unit="B/s",
        formula="400 Gb/s / 8 bits per byte, from NVIDIA's QM97XX manual, not the IBTA roadmap",
    )
    r.claim(
        "NVLink 4 (H100) per link, both directions = NVLink 3 (A100) per link (50 GB/s each, both whitepapers)",
        2 * nvlink / value("interconnect.NVLink4-H100.links"),
        value("interconnect.NVLink3-A100.bidirectional_gbytes_per_s") * 1e9 / value("interconnect.NVLink3-A100.links"),
        rel_tol=1e-12,
        unit="B/s",
        formula="H100: 900 GB/s over 18 links; A100: 600 GB/s over 12 links",
    )
    naive = traffic(grad - grad % 8, 8, "naive")
    r.add("7b_naive_8_bytes", max(naive.sent), "B", "7B, naive over 8: bytes rank 0 sends")
    _seven_b_by_hand(r, nics)


def _seven_b_by_hand(r: Result, nics: int) -> None:
    """The worked problems' figures again from second sources and closed forms: the checkpoint's parameter count,
    bf16's 1 + 8 + 7 bits, NVLink 4 as 18 links x 25 GB/s per direction (Hopper whitepaper), the NDR port from the
    QM9700 manual, one NIC per GPU as the SuperPOD's 8 rails."""
    from distlab.core.facts import value
    from distlab.models.published import claim_checkpoint_count
    from distlab.models.shapes import published_params
    from distlab.sharding.zero_checks import ndr_bytes_per_s, nvlink_bytes_per_s

    claim_checkpoint_count(r, "7B")
    rails = value("cluster_fabric.dgx-superpod-h100.rails")
    r.claim("NICs per node = the SuperPOD's rails", nics, rails, formula="one NIC per GPU, one rail per NIC")
    nvlink = nvlink_bytes_per_s()
    r.claim(
        "NVLink 4 per direction = 18 links x 25 GB/s (whitepaper)",
        r.quantities["nvlink_per_direction"].value,
        nvlink,
        rel_tol=1e-12,
        unit="B/s",
    )
    ndr = ndr_bytes_per_s()
    grad = published_params("7B") * (1 + 8 + 7) // 8  # bf16: sign, exponent, mantissa bits
    ring8, ring64, naive8 = 2 * 7 / 8 * grad, 2 * 63 / 64 * grad, 7 * grad
    eight = min(nvlink, rails * ndr)
    expect = {
        "7b_grad_bytes": grad,
        "7b_ring_8_bytes": ring8,
        "7b_ring_64_bytes": ring64,
        "7b_naive_8_bytes": naive8,
        "7b_ring_8_nvlink_s": ring8 / nvlink,
        "7b_ring_64_ndr_s": ring64 / ndr,
        "7b_64_over_8": (ring64 / ndr) / (ring8 / nvlink),
        "eight_nic_bandwidth": eight,
        "7b_ring_64_eight_nics_s": ring64 / eight,
    }
    gap = max(abs(r.quantities[k].value / v - 1) for k, v in expect.items())
    r.claim("7B problems: every figure = by hand", gap, 0.0, abs_tol=1e-12, formula="2(N-1)/N x 2 B x count / link")


def _algorithms(r: Result) -> None:
    """Bytes and steps per algorithm at a few N, each checked against its closed form."""
    buffer = EXAMPLE_BUFFER
    rows = []
    for n in (2, 3, 8, 64):
        logn = math.ceil(math.log2(n))
        expect = {
            "ring": (ring_bytes_per_rank(buffer, n), 2 * (n - 1)),
            "tree": (logn * buffer, 2 * logn),
            "naive": ((n - 1) * buffer, 2 * (n - 1)),
        }
        factor = {"ring": 2 * (n - 1) / n, "tree": logn, "naive": n - 1}  # busiest bytes / buffer, closed form
        per_step = {"ring": buffer / n, "tree": buffer, "naive": buffer}  # bytes each step moves per rank
        gap = 0.0
        for alg in SCHEDULES:
            t = traffic(buffer, n, alg)
            worst = max(t.sent + t.received)
            r.claim(
                f"{alg}, N={n}: busiest rank's bytes each way",
                worst,
                expect[alg][0],
                unit="B",
                formula={"ring": "2(N-1)/N B", "tree": "ceil(log2 N) B", "naive": "(N-1) B"}[alg],
            )
            r.claim(
                f"{alg}, N={n}: steps",
                t.steps,
                expect[alg][1],
                formula={"ring": "2(N-1)", "tree": "2 ceil(log2 N)", "naive": "2(N-1)"}[alg],
            )
            secs = t.seconds(EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH)
            rows.append([alg, n, worst / buffer, t.steps, secs * 1e3])
            closed = expect[alg][1] * (EXAMPLE_LATENCY_S + per_step[alg] / EXAMPLE_BANDWIDTH)
            gap = max(gap, abs(rows[-1][2] - factor[alg]), abs(rows[-1][4] / 1e3 / closed - 1))
            r.add(f"{alg}_{n}_seconds", secs, "s", f"{alg}, N={n}: alpha-beta time for the example buffer")
            r.add(f"{alg}_{n}_busiest_bytes", worst, "B", f"{alg}, N={n}: busiest rank's bytes, each way")
        r.claim(f"N={n}: table's bytes / buffer and times = closed forms", gap, 0.0, abs_tol=1e-12)
        t = traffic(buffer, n, "ring")
        r.claim(
            f"ring, N={n}: simulated alpha-beta time = 2(N-1)(alpha + B/(N beta))",
            t.seconds(EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH),
            ring_seconds(buffer, n, EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH),
            rel_tol=1e-12,
            unit="s",
        )
    r.table(
        "algorithms",
        ["algorithm", "ranks N", "busiest rank sends (x buffer)", "steps", "time (ms)"],
        rows,
        caption=f"Buffer {format_quantity(buffer, 'B')}; time with the illustrative alpha = "
        f"{format_quantity(EXAMPLE_LATENCY_S, 's')}, beta = {format_quantity(EXAMPLE_BANDWIDTH, 'B/s')} "
        "per direction",
    )
    r.add("example_buffer", buffer, "B", "example buffer")
    r.add("example_latency_s", EXAMPLE_LATENCY_S, "s", "illustrative alpha")
    r.add("example_bandwidth", EXAMPLE_BANDWIDTH, "B/s", "illustrative beta")
    # Where the unpipelined tree beats the ring (N = 64): alpha-dominated small messages.
    n = 64
    logn = math.ceil(math.log2(n))
    # 2(N-1)(a + B/(N b)) = 2 log N (a + B/b)  =>  B = a b (N-1-log N) / (log N - (N-1)/N)
    crossover = EXAMPLE_LATENCY_S * EXAMPLE_BANDWIDTH * (n - 1 - logn) / (logn - (n - 1) / n)
    r.add("crossover_bytes_64", crossover, "B", "N=64: below this buffer size the tree is faster than the ring")
    a, b = EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH
    r.claim(
        "N=64: ring time = tree time at the crossover",
        2 * (n - 1) * (a + crossover / n / b),
        2 * logn * (a + crossover / b),
        rel_tol=1e-9,
        unit="s",
    )
    below = traffic(int(crossover // 2), n, "tree").seconds(EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH) < traffic(
        int(crossover // 2), n, "ring"
    ).seconds(EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH)
    above = traffic(int(crossover * 2), n, "tree").seconds(EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH) > traffic(
        int(crossover * 2), n, "ring"
    ).seconds(EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH)
    r.claim("N=64: tree faster at half the crossover size and slower at twice it", int(below and above), 1)


def _growth_misreads(fig, buffer: int) -> int:
    """The growth figure read back, against closed forms written out here: panel 1 the busiest rank's bytes / buffer
    (ring 2L - c[r+1] - c[r+2] at its worst rank, tree ceil(log2 N), naive N - 1), panel 2 the steps (2(N-1),
    2 ceil(log2 N), 2(N-1)), panel 3 the alpha-beta time at the N its axis label names (every step carries the largest
    chunk ceil(L/N) for the ring, the whole buffer otherwise); the guide line at the ring's limit 2; every tick
    labelled with its own position."""
    ax1, ax2, ax3 = fig.axes
    a, b = EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH
    n3 = int(ax3.get_xlabel().rsplit("N = ", 1)[1])
    bad = 0
    for alg in SCHEDULES:
        (l1,) = [x for x in ax1.get_lines() if x.get_label() == alg]
        (l2,) = [x for x in ax2.get_lines() if x.get_label() == alg]
        (l3,) = [x for x in ax3.get_lines() if x.get_label() == alg]
        for n, y1, y2 in zip(l1.get_xdata(), l1.get_ydata(), l2.get_ydata()):
            n = int(n)
            logn = math.ceil(math.log2(n))
            want1 = {"ring": max(_ring_sent_by_hand(buffer, n)) / buffer, "tree": logn, "naive": n - 1}[alg]
            want2 = {"ring": 2 * (n - 1), "tree": 2 * logn, "naive": 2 * (n - 1)}[alg]
            bad += not math.isclose(y1, want1, rel_tol=1e-12) or y2 != want2
        logn = math.ceil(math.log2(n3))
        for size, y in zip(l3.get_xdata(), l3.get_ydata()):
            size = int(size)
            steps, chunk = {
                "ring": (2 * (n3 - 1), -(-size // n3)),
                "tree": (2 * logn, size),
                "naive": (2 * (n3 - 1), size),
            }[alg]
            bad += not math.isclose(y, steps * (a + chunk / b), rel_tol=1e-12)
    guides = [x for x in ax1.get_lines() if x.get_label() not in SCHEDULES]
    bad += [list(g.get_ydata()) for g in guides] != [[2, 2]]
    for ax in (ax1, ax2):
        bad += sum(t.get_text() != f"{p:g}" for p, t in zip(ax.get_xticks(), ax.get_xticklabels()))
    return bad


def _growth_figure(r: Result) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buffer = 1_000_000
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(11, 3.4))
    sizes = np.logspace(3, 10, 36)
    for alg, style in (("ring", "-o"), ("tree", "-s"), ("naive", "-^")):
        ts = [traffic(buffer, n, alg) for n in GROWTH_RANKS]
        ax1.plot(GROWTH_RANKS, [max(t.sent + t.received) / buffer for t in ts], style, ms=3, label=alg)
        ax2.plot(GROWTH_RANKS, [t.steps for t in ts], style, ms=3, label=alg)
        times = [traffic(int(s), 64, alg).seconds(EXAMPLE_LATENCY_S, EXAMPLE_BANDWIDTH) for s in sizes]
        ax3.plot(sizes, times, style, ms=2, label=alg)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks([2, 4, 8, 16, 32, 64], ["2", "4", "8", "16", "32", "64"])
        ax.set_xticks([], minor=True)
    ax1.set(yscale="log", xlabel="ranks N", ylabel="busiest rank's bytes / buffer")
    ax2.set(yscale="log", xlabel="ranks N", ylabel="steps (ring and naive coincide)")
    ax3.set(xscale="log", yscale="log", xlabel="buffer (bytes), N = 64", ylabel="alpha-beta time (s)")
    ax1.axhline(2, color="grey", lw=0.6, ls=":")
    for ax in (ax1, ax2, ax3):
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both", lw=0.3)
    fig.tight_layout()
    r.claim("growth figure read back: points off their closed forms", _growth_misreads(fig, buffer), 0)
    r.figure(
        "growth",
        fig,
        "Simulated all-reduce: the busiest rank's bytes (the ring's approach 2 x buffer), "
        "steps, and alpha-beta time at N = 64 with the illustrative alpha and beta",
    )


def _drawing_misreads(fig, counts: np.ndarray, received: np.ndarray) -> int:
    """The ring drawing read back, against the hand-derived ring (not the draw code's own helpers): one cell per
    (row, GPU, chunk); its fill the blend (k - 1)/(N - 1) of the way from the lightest shade to the site's blue, k the
    GPUs its chunk sums; an orange outline exactly on the chunk received that step; cells left to right GPU by GPU
    then chunk by chunk, rows top to bottom in step order, none overlapping; row labels start, RS 1.., AG 1..; the
    legend's squares the same N shades; a text or cell outside the figure or overlapping a text counts too."""
    from matplotlib.colors import to_rgb

    from distlab.core.drawing import BLUE, ORANGE, legibility_problems

    ax = fig.axes[0]
    rows, n, _ = counts.shape
    light, dark = np.array((0.87, 0.93, 0.97)), np.array(to_rgb(BLUE))
    blend = [light + (dark - light) * k / (n - 1) for k in range(n)]
    cells = {}
    for p in ax.patches:
        gid = p.get_gid() or ""
        if gid.startswith("cell:"):
            cells[tuple(int(v) for v in gid.split(":")[1:])] = p
    bad = abs(len(cells) - rows * n * n)
    for (row, g, c), p in cells.items():
        bad += not np.allclose(to_rgb(p.get_facecolor()), blend[counts[row, g, c] - 1], atol=1e-9)
        outlined = to_rgb(p.get_edgecolor()) == to_rgb(ORANGE)
        bad += outlined != (row > 0 and received[row - 1, g] == c)
    for row in range(rows):  # left to right: GPU 0's chunks 0..N-1, then GPU 1's, ...; no two cells overlap
        xs = [(cells[row, g, c].get_x(), cells[row, g, c].get_width()) for g in range(n) for c in range(n)]
        bad += sum(not x0 + w0 <= x1 for (x0, w0), (x1, _) in zip(xs, xs[1:]))
    ys = [(cells[row, 0, 0].get_y(), cells[row, 0, 0].get_height()) for row in range(rows)]
    bad += sum(not y0 + h0 <= y1 for (y0, h0), (y1, _) in zip(ys, ys[1:]))
    ticks = list(ax.get_yticks())
    bad += sum(not y <= t <= y + h for (y, h), t in zip(ys, ticks))  # each label on its row
    labels = [t.get_text() for t in ax.get_yticklabels()]
    bad += labels != ["start"] + [f"RS {s}" for s in range(1, n)] + [f"AG {s}" for s in range(1, n)]
    legend = [p for p in ax.patches if not (p.get_gid() or "")]
    bad += sorted(tuple(np.round(to_rgb(p.get_facecolor()), 9)) for p in legend) != sorted(
        tuple(np.round(b, 9)) for b in blend
    )
    fig.canvas.draw()
    return bad + len(legibility_problems(fig))


def _layout_misreads(fig, n: int) -> int:
    """The ring drawing's layout read back: each GPU's name centred over its buffer, above the first row; the dotted
    divider between the last reduce-scatter row and the first all-gather row; the legend below the last row, each
    count centred under its square and each caption right of its square, level with it; the received chunk's
    outline thicker than the others and drawn over them; the legend's squares the cells' own (size, outline); each
    row label level with its row's middle; as much blank left as right of the ring; no text or square overlapping
    another, every square inside the axes' limits and every text inside the figure."""
    from matplotlib.colors import to_rgb

    from distlab.core.drawing import ORANGE

    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    patches = {p.get_gid() or f"legend:{i}": p for i, p in enumerate(ax.patches)}
    cells = {k: p for k, p in patches.items() if k.startswith("cell:")}
    legend = [p for k, p in patches.items() if not k.startswith("cell:") and k != "legend:received"]
    received = patches.get("legend:received")
    rows = 2 * n - 1
    bad = (len(legend) != n) + (received is None)
    if bad:
        return bad
    span = lambda ps: (min(p.get_x() for p in ps), max(p.get_x() + p.get_width() for p in ps))
    top = lambda ps: (min(p.get_y() for p in ps), max(p.get_y() + p.get_height() for p in ps))
    mid_y = lambda p: p.get_y() + p.get_height() / 2
    texts = {t.get_text(): t for t in ax.texts}
    first_top = top([p for k, p in cells.items() if k.startswith("cell:0:")])[0]
    for g in range(n):  # each GPU's name centred over its chunks, above the first row
        t = texts.get(f"GPU {g}")
        lo, hi = span([p for k, p in cells.items() if k.split(":")[2] == str(g)])
        bad += t is None or not math.isclose(t.get_position()[0], (lo + hi) / 2) or not t.get_position()[1] <= first_top
    rs_bottom = top([p for k, p in cells.items() if k.startswith(f"cell:{n - 1}:")])[1]
    ag_top = top([p for k, p in cells.items() if k.startswith(f"cell:{n}:")])[0]
    dividers = [ln.get_ydata()[0] for ln in ax.get_lines()]
    bad += len(dividers) != 1 or not all(rs_bottom <= y <= ag_top for y in dividers)
    last_bottom = top([p for k, p in cells.items() if k.startswith(f"cell:{rows - 1}:")])[1]
    legend.sort(key=lambda p: p.get_x())
    bad += sum(not last_bottom < p.get_y() for p in [*legend, received])  # the legend below the drawing
    for k, p in enumerate(legend):  # each count centred under its square
        t = texts.get(str(k + 1))
        bad += t is None or not math.isclose(t.get_position()[0], p.get_x() + p.get_width() / 2)
        bad += t is not None and not p.get_y() + p.get_height() <= t.get_position()[1]
    for caption, square in (("GPUs summed", legend[-1]), ("chunk received this step", received)):
        t = texts.get(caption)
        bad += t is None or not math.isclose(t.get_position()[1], mid_y(square))
        gap = t.get_position()[0] - square.get_x() - square.get_width() if t is not None else -1.0
        bad += not 0 <= gap <= square.get_width()  # right of its square, nearer than one square-width
    got = [p for p in cells.values() if to_rgb(p.get_edgecolor()) == to_rgb(ORANGE)]
    plain = [p for p in cells.values() if to_rgb(p.get_edgecolor()) != to_rgb(ORANGE)]
    bad += max(p.get_linewidth() for p in plain) >= min(p.get_linewidth() for p in got)
    bad += received.get_linewidth() != got[0].get_linewidth() or to_rgb(received.get_edgecolor()) != to_rgb(ORANGE)
    bad += max(p.get_zorder() for p in plain) >= min(p.get_zorder() for p in got)
    size = lambda p: (p.get_width(), p.get_height())
    bad += sum(size(p) != size(plain[0]) for p in [*cells.values(), *legend, received])  # the legend's same squares
    bad += sum(p.get_linewidth() != plain[0].get_linewidth() for p in [*plain, *legend])
    ticks = list(ax.get_yticks())  # each row's label level with its cells' middle
    bad += len(ticks) != rows or not all(math.isclose(ticks[r], mid_y(cells[f"cell:{r}:0:0"])) for r in range(rows))
    (x0, x1), (lo, hi) = ax.get_xlim(), span(list(cells.values()))
    bad += not math.isclose(lo - x0, x1 - hi)  # the ring centred left to right: as much blank either side
    # nothing overlapping (cell against cell is checked above), squares inside the limits, texts inside the figure
    boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().strip()]
    labels = [t.get_window_extent(renderer) for t in ax.get_yticklabels() if t.get_text().strip()]
    squares = [p.get_window_extent(renderer) for p in ax.patches]
    page = fig.bbox
    shapes = [(False, b) for b in boxes + labels + [s for s, p in zip(squares, ax.patches) if p not in cells.values()]]
    shapes += [(True, s) for s, p in zip(squares, ax.patches) if p in cells.values()]  # cell to cell: checked above
    bad += sum(
        not (cell_a and cell_b) and a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1
        for i, (cell_a, a) in enumerate(shapes)
        for cell_b, b in shapes[i + 1 :]
    )
    bad += sum(not page.contains(b.x0, b.y0) or not page.contains(b.x1, b.y1) for b in boxes + labels)
    (x0, x1), (y1, y0) = ax.get_xlim(), ax.get_ylim()  # y grows downwards
    inside = lambda p: x0 <= p.get_x() <= p.get_x() + p.get_width() <= x1 and y0 <= p.get_y() <= y1 - p.get_height()
    bad += sum(not inside(p) for p in ax.patches)
    return bad


PICTURE_RANKS = 4  # the drawing's ring: 2 x 3 steps, 16 chunks, legible on a phone


def _ring_picture(r: Result) -> None:
    """The ring drawn from the simulator's own buffers, with claims that the drawing shows what the textbook says."""
    from distlab.data_parallel.ring_picture import draw_ring

    n = PICTURE_RANKS
    counts, received = ring_contributions(n)
    rs_steps = sum(1 for s in schedule("ring", n, n) if s.phase == "reduce-scatter")
    r.add("picture_ranks", n, "GPUs", "GPUs in the ring drawing")
    r.add("picture_rs_steps", rs_steps, "steps", "reduce-scatter steps in the drawing")
    r.claim("drawing: reduce-scatter steps = N - 1, all-gather steps = N - 1", len(counts) - 1, 2 * (n - 1))
    r.claim("drawing: reduce-scatter steps drawn = N - 1", rs_steps, n - 1)
    after_rs = counts[n - 1]
    r.claim(
        "drawing: GPUs holding, after reduce-scatter, exactly one fully summed chunk, chunk (r + 1) mod N",
        sum(1 for g, row in enumerate(after_rs) if list(np.flatnonzero(row == n)) == [(g + 1) % n]),
        n,
        unit="GPUs",
    )
    r.claim("drawing: after all-gather every chunk of every GPU sums all N", int(counts[-1].min()), n)
    hand_counts, hand_received = _ring_counts_by_hand(n)
    r.claim(
        "drawing: every chunk's sum and move = by hand",
        int((counts != hand_counts).sum() + (received != hand_received).sum()),
        0,
    )
    fig = draw_ring(counts, received)
    r.claim(
        "ring drawing read back: cells off the hand-derived ring", _drawing_misreads(fig, hand_counts, hand_received), 0
    )
    r.claim("ring drawing's layout read back: misplaced, overlapping, out of frame", _layout_misreads(fig, n), 0)
    r.figure(
        "ring_steps",
        fig,
        f"A ring all-reduce on {n} GPUs, from the simulator's buffers: each GPU's buffer is cut into {n} chunks; "
        f"in each of the {rs_steps} reduce-scatter (RS) steps every GPU sends one chunk to its right-hand neighbour, "
        "which adds it in, so one chunk per GPU ends summed over all GPUs; the all-gather (AG) steps then pass those "
        "finished chunks round the ring",
    )


# ---------------------------------------------------------------- the CLI
@command("allreduce", "bytes each rank sends and receives in an all-reduce (ring, tree, naive), alpha-beta time")
def allreduce_command(argv: list[str]) -> int:
    p = parser(
        "allreduce",
        "Simulate an all-reduce schedule and count the bytes of every message.\n"
        "Ring chunks like numpy.array_split: the first (elements mod N) chunks are one element longer.\n"
        "example: distlab allreduce --ranks 8 --bytes 1e9 --latency 5e-6 --bandwidth 100e9",
    )
    p.add_argument("--ranks", type=positive(int, MAX_GPUS), required=True, help="number of ranks N")
    p.add_argument("--bytes", type=positive(int, MAX_BYTES), required=True, help="buffer size per rank, bytes")
    p.add_argument("--algorithm", choices=list(SCHEDULES), default="ring", help="schedule (default ring)")
    p.add_argument(
        "--element-bytes",
        type=positive(int),
        default=1,
        help="bytes per element: chunks never split an element (default 1)",
    )
    p.add_argument("--latency", type=positive(float), help="alpha: seconds per step")
    p.add_argument("--bandwidth", type=positive(float), help="beta: bytes per second per direction")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    if (args.latency is None) != (args.bandwidth is None):
        raise ValueError("--latency and --bandwidth go together (the alpha-beta time needs both)")
    t = traffic(args.bytes, args.ranks, args.algorithm, args.element_bytes)
    seconds = t.seconds(args.latency, args.bandwidth) if args.latency is not None else None
    out = {
        "algorithm": args.algorithm,
        "ranks": args.ranks,
        "bytes": args.bytes,
        "element_bytes": args.element_bytes,
        "steps": t.steps,
        "bytes_sent_per_rank": t.sent,
        "bytes_received_per_rank": t.received,
        "bytes_sent_max": max(t.sent),
        "bytes_received_max": max(t.received),
        "bytes_total": sum(t.sent),
        "ring_formula_bytes_per_rank": ring_bytes_per_rank(args.bytes, args.ranks),
        "latency_s": args.latency,
        "bandwidth_bytes_per_s": args.bandwidth,
        "time_s": seconds,
    }
    q = lambda b: format_quantity(b, "B")
    lines = [
        f"{args.algorithm} all-reduce of {q(args.bytes)} over {args.ranks} ranks: {t.steps} steps",
        f"  bytes sent per rank:     {q(min(t.sent))} .. {q(max(t.sent))}",
        f"  bytes received per rank: {q(min(t.received))} .. {q(max(t.received))}",
        f"  all ranks together:      {q(sum(t.sent))}",
        f"  ring formula 2(N-1)/N x B = {q(ring_bytes_per_rank(args.bytes, args.ranks))}",
    ]
    if seconds is not None:
        lines.append(
            f"  alpha-beta time: {format_quantity(seconds, 's')} "
            f"(alpha {args.latency:g} s x {t.steps} steps + bytes / {q(args.bandwidth)}/s)"
        )
    emit(out, args.json, "\n".join(lines))
    return 0
