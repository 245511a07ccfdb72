"""Activation memory measured: every tensor a real transformer block keeps for backward, counted with
saved-tensor hooks against the closed form in distlab.memory.activations; then activation checkpointing (full,
selective, every k layers), measured the same way with a counter of recomputed forwards.

The block is distlab.models.gpt.Block (the model chapter 1 trains) in bf16, with dropout that keeps a 1-byte
mask. Checkpointing comes twice: `Checkpoint`, a naive autograd Function that keeps its inputs and runs
the function again in backward (its saves go through the same hooks, so the recompute is visible), and
torch.utils.checkpoint, which must give the same gradients.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import nn

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.memory import activation_checks
from distlab.memory.activations import (
    block_bytes,
    block_param_bytes,
    block_terms,
    layer_forward_flops,
    published_bytes_per_layer,
    stack_peak_bytes,
)
from distlab.models.gpt import Block, GPTConfig
from distlab.models.layers import MaskDropout
from distlab.runtime.saved_tensors import Checkpoint, SavedTensors
from distlab.runtime.threads import single_threaded

DTYPE = torch.bfloat16
NORM_STAT_BYTES = {"cpu": 2, "cuda": 4}  # LayerNorm's saved mean and 1/std: input dtype on CPU, fp32 on CUDA
SHAPES = [(97, 1, 64, 4), (128, 2, 64, 4), (257, 2, 96, 4), (200, 3, 120, 5), (256, 1, 192, 12), (512, 1, 96, 4)]
MAIN = (257, 2, 96, 4)  # (s, b, h, a) of the term-by-term table; head dim 24


def block(h: int, a: int, *, dropout: float = 0.1, device: str = "cpu", seed: int = 0) -> Block:
    """distlab.models.gpt.Block (LayerNorm, attention, LayerNorm, 4h GeLU MLP) in bf16, 1-byte dropout masks."""
    torch.manual_seed(seed)
    blk = Block(GPTConfig(hidden=h, heads=a))
    for parent, name in ((blk.attn, "attn_drop"), (blk.attn, "resid_drop"), (blk.mlp, "drop")):
        setattr(parent, name, MaskDropout(dropout))
    return blk.to(device=device, dtype=DTYPE)


# ---------------------------------------------------------------- one block
def measure_block(s: int, b: int, h: int, a: int, *, dropout: float = 0.1, device: str = "cpu") -> dict:
    """Forward and backward through one block; bytes saved for backward after the forward."""
    blk = block(h, a, dropout=dropout, device=device)
    x = torch.randn(b, s, h, device=device, dtype=DTYPE, requires_grad=True)
    with SavedTensors(blk) as saved:
        y = blk(x)  # (B, N, h)
        out = {
            "bytes": saved.live,
            "param_bytes": saved.param_bytes,
            "buffers": saved.buffers,
            "by_module": dict(saved.by_module),
        }
        y.backward(torch.randn_like(y))
    out["left_after_backward"] = saved.live
    return out


def allocator_bytes(s: int, b: int, h: int, a: int, device: str = "cuda") -> int:
    """CUDA only: bytes the caching allocator holds after one block's forward, less the output."""
    blk = block(h, a, device=device)
    x = torch.randn(b, s, h, device=device, dtype=DTYPE, requires_grad=True)
    blk(x).sum().backward()  # warm-up: cuBLAS workspaces are allocated on first use
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    y = blk(x)
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated() - before - y.untyped_storage().nbytes()


# ---------------------------------------------------------------- checkpointing
def measure_stack(
    layers: list[nn.Module],
    x: torch.Tensor,
    *,
    checkpointed: int = 0,
    segment: int = 1,
    selective: bool = False,
    use_torch: bool = False,
    seed: int = 1,
) -> dict:
    """Forward and backward through `layers`: the first `checkpointed` in segments of `segment` layers
    (naive Checkpoint, or torch.utils.checkpoint with use_torch), the rest plain; `selective`
    checkpoints each block's attention core instead. Returns saved bytes after the forward, peak saved
    bytes, layer forwards run in forward and again in backward, attention-core calls, and the gradients."""
    calls = defaultdict(int)
    handles = [m.register_forward_pre_hook(lambda m, a: calls.__setitem__("layer", calls["layer"] + 1)) for m in layers]
    for blk in layers:
        if isinstance(blk, Block):
            inner = type(blk.attn).core.__get__(blk.attn)

            def core(q, k, v, inner=inner):
                calls["core"] += 1
                return inner(q, k, v)

            blk.attn.core = (lambda q, k, v, core=core: Checkpoint.apply(core, q, k, v)) if selective else core
    x = x.detach().requires_grad_(True)
    for m in layers:
        m.zero_grad(set_to_none=True)
    stack = nn.ModuleList(layers)
    torch.manual_seed(seed)  # the same dropout masks in every variant
    with SavedTensors(stack) as saved:
        y = x
        for i in range(0, len(layers), segment if checkpointed else len(layers)):
            part = nn.Sequential(*layers[i : i + segment]) if i < checkpointed else nn.Sequential(*layers[i:])
            if i >= checkpointed:
                y = part(y)
                break
            y = (
                torch.utils.checkpoint.checkpoint(part, y, use_reentrant=False)
                if use_torch
                else Checkpoint.apply(part, y)
            )
        held, forward_calls, forward_core = saved.live, calls["layer"], calls["core"]
        y.backward(torch.ones_like(y))
    for handle in handles:
        handle.remove()
    for blk in layers:
        if isinstance(blk, Block):
            del blk.attn.core  # back to the class's method
    grads = [x.grad] + [p.grad for m in layers for p in m.parameters()]
    return {
        "held": held,
        "peak": saved.peak,
        "left": saved.live,
        "forwards": forward_calls,
        "recomputed": calls["layer"] - forward_calls,
        "core_recomputed": calls["core"] - forward_core,
        "grads": grads,
    }


def extra_forward(run: dict, flops: dict, layers: int) -> float:
    """Recomputed matmul FLOPs as a fraction of one forward: whole layers, plus attention cores run again
    on their own (a recomputed layer runs its core too)."""
    core_only = max(0, run["core_recomputed"] - run["recomputed"])
    return (run["recomputed"] * flops["layer"] + core_only * flops["core"]) / (layers * flops["layer"])


def max_grad_difference(a: list, b: list) -> float:
    return max(float((ga.float() - gb.float()).abs().max()) for ga, gb in zip(a, b))


# ---------------------------------------------------------------- experiments
@experiment(
    "activation-memory",
    "bytes a real transformer block saves for backward, counted with saved-tensor "
    "hooks, vs our closed form and the published sbh(34 + 5as/h)",
)
@single_threaded
def activation_memory(device: str) -> Result:
    r = Result("activation-memory")
    k = NORM_STAT_BYTES[device]
    rows, diff_off, gap, rel, left = [], 0, 0, 0.0, 0
    for s, b, h, a in SHAPES:
        on, off = measure_block(s, b, h, a, device=device), measure_block(s, b, h, a, dropout=0.0, device=device)
        ours, ours_off = (block_bytes(s, b, h, a, norm_stat_bytes=k, dropout=d) for d in (True, False))
        paper = 34 * s * b * h + 5 * a * s * s * b  # sbh(34 + 5as/h) in exact integer arithmetic
        r.claim(f"s={s}, b={b}, h={h}, a={a}: counted bytes = our block's formula", on["bytes"], ours, unit="B")
        diff_off = max(diff_off, abs(off["bytes"] - ours_off))
        gap = max(gap, abs(on["bytes"] - paper - (s * s + 4 * s * b * k)))
        rel = max(rel, abs(on["bytes"] - paper) / paper)
        left = max(left, on["left_after_backward"], off["left_after_backward"])
        rows.append(
            [
                s,
                b,
                h,
                a,
                on["bytes"],
                ours,
                paper,
                Quantity((on["bytes"] - paper) / paper, "fraction"),
                off["bytes"],
                ours_off,
            ]
        )
    r.table(
        "sweep",
        [
            "s",
            "b",
            "h",
            "a",
            "counted (dropout)",
            "our formula",
            "published sbh(34 + 5as/h)",
            "counted / published − 1",
            "counted (no dropout)",
            "our formula (no dropout)",
        ],
        rows,
        caption="Bytes one bf16 block keeps for backward, counted with saved-tensor hooks",
    )
    r.claim("no dropout, every shape: counted bytes = our formula (largest difference)", diff_off, 0, unit="B")
    r.claim(
        "counted − published = causal mask s² + LayerNorm statistics 4sb·k (largest difference)",
        gap,
        0,
        unit="B",
        formula=f"k = {k} B per statistic on {device}",
    )
    r.claim(
        "published formula within 5 % of the counted bytes (every shape)", rel, 0.05, relation="<=", unit="fraction"
    )
    r.claim("every saved buffer released by the end of backward", left, 0, unit="B")
    r.add("worst_relative_gap", rel, "fraction", "largest |counted − published| / published over the sweep")
    r.add("norm_stat_bytes", k, "B", "bytes of one saved LayerNorm statistic on this device")

    s, b, h, a = MAIN
    main = measure_block(s, b, h, a, device=device)
    terms = block_terms(s, b, h, a, norm_stat_bytes=k)
    grouped: dict[str, list] = {}
    for t in terms:
        g = grouped.setdefault(t.module, [[], [], 0, 0])
        g[0].append(t.what)
        g[1].append(t.paper)
        g[2] += t.paper_bytes
        g[3] += t.bytes
    r.table(
        "terms",
        ["module", "tensors kept for backward", "paper", "paper bytes", "our formula", "counted"],
        [
            [m, "; ".join(w), " + ".join(p for p in ps if p != "—") or "—", pb, ob, main["by_module"].get(m, 0)]
            for m, (w, ps, pb, ob) in grouped.items()
        ],
        caption=f"One block at s = {s}, b = {b}, h = {h}, a = {a}, dropout on, bf16 ({device})",
    )
    for m, (_, _, _, ob) in grouped.items():
        r.claim(f"{m}: counted = formula", main["by_module"].get(m, 0), ob, unit="B")
    r.claim(
        "parameters referenced by backward = weights + LayerNorm weights and biases (bf16)",
        main["param_bytes"],
        block_param_bytes(h),
        unit="B",
    )
    for name, v, unit, desc in (
        ("s", s, "", "sequence"),
        ("b", b, "", "micro-batch"),
        ("h", h, "", "hidden"),
        ("a", a, "", "heads"),
        ("main_bytes", main["bytes"], "B", "counted, dropout on"),
        ("main_published", published_bytes_per_layer(s, b, h, a), "B", "published formula"),
        ("main_mask_bytes", s * s, "B", "causal mask"),
        ("main_stat_bytes", 4 * s * b * k, "B", "LayerNorm statistics, two norms"),
        ("main_param_bytes", main["param_bytes"], "B", "parameters saved (not extra)"),
    ):
        r.add(name, v, unit, desc)
    hb, sb = 4096, 4096  # the same gap at a 7B layer's shape (s = 4096, b = 1, h = 4096, a = 32)
    r.add(
        "gap_7b",
        (sb * sb + 4 * sb * k) / published_bytes_per_layer(sb, 1, hb, 32),
        "fraction",
        "causal mask + statistics relative to the published formula at s = h = 4096, a = 32, b = 1",
    )
    if device == "cuda":
        s2, b2, h2, a2 = 1024, 2, 1024, 16
        held = allocator_bytes(s2, b2, h2, a2)
        r.claim(
            "CUDA allocator: bytes held after forward = counted formula",
            held,
            block_bytes(s2, b2, h2, a2, norm_stat_bytes=k),
            rel_tol=0.002,
            unit="B",
            formula="memory_allocated after forward − before − output; 512-byte allocation rounding",
        )
    _per_token_figure(r, device, k)
    _block_picture(r, main["by_module"], grouped)
    activation_checks.activation_memory(r)  # every number shown, against the block worked by hand
    return r


def _block_picture(r: Result, by_module: dict[str, int], grouped: dict[str, list]) -> None:
    """The term-by-term table drawn: one bar per module from the hooks' count, in forward order; the bars checked
    against the closed form's bytes per module (the table's "our formula" column)."""
    from distlab.memory.block_picture import SCORES, draw_block

    order = list(grouped)
    fig = draw_block(by_module, order)
    drawn = {p.get_gid()[4:]: p.get_width() * 1e3 for p in fig.axes[0].patches if (p.get_gid() or "")[:4] == "bar:"}
    r.claim(
        "drawing: every module's bar = its bytes by the closed form (largest difference)",
        max(abs(drawn.get(m, 0.0) - g[3]) for m, g in grouped.items()),
        0,
        abs_tol=1e-6,
        unit="B",
    )
    r.claim(
        "drawing: the modules drawn as holding s x s scores are the ones whose terms carry s²",
        sum(1 for m, g in grouped.items() if ("s²" in " ".join(g[1])) != (m in SCORES)),
        0,
    )
    scores = sum(by_module.get(m, 0) for m in SCORES)
    r.claim(
        "drawing's caption: the s x s modules keep more than the rest of the block together",
        scores,
        sum(by_module.values()) - scores,
        relation=">=",
        unit="B",
    )
    r.figure(
        "block",
        fig,
        "What one block keeps for backward, module by module, counted with saved-tensor hooks (the table below, "
        "drawn): the attention core's scores and their dropout mask, which grow with s², outweigh the rest",
    )


def _per_token_figure(r: Result, device: str, k: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h, a, b = 96, 4, 1
    seqs = [64, 128, 256, 512, 1024]
    counted = [measure_block(s, b, h, a, device=device)["bytes"] / (s * b * h) for s in seqs]
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    ax.plot(seqs, [34 + 5 * a * s / h for s in seqs], "-", label="published: 34 + 5as/h")
    ax.plot(
        seqs,
        [block_bytes(s, b, h, a, norm_stat_bytes=k) / (s * b * h) for s in seqs],
        "--",
        label="our block's formula",
    )
    ax.plot(seqs, counted, "o", label="counted (saved-tensor hooks)")
    ax.axhline(34, color="gray", lw=0.8, ls=":", label="34: the part linear in s")
    ax.set_xticks(seqs)
    ax.set_xlabel("sequence length s")
    ax.set_ylabel("bytes per (token × h)")
    ax.legend(fontsize=8)
    activation_checks.per_token_figure(r, ax, h, a, b, k)
    r.figure(
        "per_token",
        fig,
        f"Activation bytes per token per unit of width, one block (h = {h}, a = {a}, "
        "b = 1, dropout on): the attention core's 5as/h grows with s",
    )
    r.data["per_token"] = dict(zip(seqs, counted))


CKPT = dict(layers=16, s=128, b=2, h=64, a=4)  # the stack for checkpointing
CHAIN = 64  # layers of the one-tensor chain (Chen et al.'s setting)


@experiment(
    "checkpointing",
    "activation checkpointing measured: saved bytes, peak, recomputed forwards; full, "
    "selective and every-k-layers, naive vs torch.utils.checkpoint",
)
@single_threaded
def checkpointing(device: str) -> Result:
    r = Result("checkpointing")
    L, s, b, h, a = (CKPT[n] for n in ("layers", "s", "b", "h", "a"))
    k = NORM_STAT_BYTES[device]
    layers = [block(h, a, device=device, seed=i) for i in range(L)]
    torch.manual_seed(L)
    x = torch.randn(b, s, h, device=device, dtype=DTYPE)
    layer_b, input_b, sel_b = (
        block_bytes(s, b, h, a, norm_stat_bytes=k, recompute=rc) for rc in ("none", "full", "selective")
    )
    runs = {
        "none": measure_stack(layers, x),
        "full": measure_stack(layers, x, checkpointed=L),
        "full (torch.utils.checkpoint)": measure_stack(layers, x, checkpointed=L, use_torch=True),
        "selective": measure_stack(layers, x, selective=True),
    }
    expect = {
        "none": (L * layer_b, stack_peak_bytes(L, 1, 0, layer_b, input_b), 0, 0),
        "full": (L * input_b, stack_peak_bytes(L, 1, L, layer_b, input_b), L, L),
        "full (torch.utils.checkpoint)": (L * input_b, None, L, L),
        "selective": (L * sel_b, L * sel_b, 0, L),
    }
    # Selective: while the last layer's core is recomputed, the layers before it hold their selective
    # saves, and the last layer still holds what precedes the core (ln1, the qkv input); the rest of it
    # (ln2, the MLP, proj) has been released.
    before_core = sum(
        t.bytes
        for t in block_terms(s, b, h, a, norm_stat_bytes=k)
        if t.module in ("ln1", "attn.qkv", "attn", "attn.attn_drop")
    )
    expect["selective"] = (L * sel_b, max(L * sel_b, (L - 1) * sel_b + before_core), 0, L)
    flops = layer_forward_flops(s, b, h)
    rows = []
    for name, run in runs.items():
        held, peak, rec, core = expect[name]
        r.claim(f"{name}: bytes saved after forward", run["held"], held, unit="B")
        if peak is not None:
            r.claim(f"{name}: peak bytes saved", run["peak"], peak, unit="B")
        r.claim(f"{name}: layer forwards run again in backward", run["recomputed"], rec)
        r.claim(f"{name}: attention cores run again in backward", run["core_recomputed"], core)
        diff = max_grad_difference(run["grads"], runs["none"]["grads"])
        r.claim(
            f"{name}: gradients equal no checkpointing (largest difference)",
            diff,
            0,
            abs_tol=0 if device == "cpu" else 1e-2,
        )
        extra = extra_forward(run, flops, L)
        rows.append(
            [
                name,
                run["held"],
                run["peak"] if peak is not None else "—",
                run["recomputed"],
                run["core_recomputed"],
                Quantity(extra, "fraction"),
                Quantity(extra / 3, "fraction"),
            ]
        )
    r.table(
        "variants",
        [
            "variant",
            "saved after forward (B)",
            "peak saved (B)",
            "layer forwards recomputed",
            "attention cores recomputed",
            "extra FLOPs / forward",
            "extra FLOPs / step",
        ],
        rows,
        caption=f"{L} bf16 blocks, s = {s}, b = {b}, h = {h}, a = {a}, dropout on ({device}). A step is "
        "forward + backward, about three forwards of matmul FLOPs",
    )
    for name, v, unit, desc in (
        ("layers", L, "", "layers"),
        ("layer_bytes", layer_b, "B", "one layer, none"),
        ("input_bytes", input_b, "B", "one layer input"),
        ("selective_bytes", sel_b, "B", "one layer, selective"),
        ("none_held", runs["none"]["held"], "B", "none: saved after forward"),
        ("full_held", runs["full"]["held"], "B", "full: saved after forward"),
        ("full_peak", runs["full"]["peak"], "B", "full: peak saved"),
        ("selective_held", runs["selective"]["held"], "B", "selective: saved"),
        ("layer_over_input", layer_b / input_b, "", "one layer's saves / its input"),
        (
            "core_flop_share",
            flops["core"] / flops["layer"],
            "fraction",
            "attention core's share of a layer's forward FLOPs",
        ),
    ):
        r.add(name, v, unit, desc)
    r.add(
        "selective_extra_step",
        extra_forward(runs["selective"], flops, L) / 3,
        "fraction",
        "selective: extra FLOPs per training step",
    )
    _segments(r, layers, x, layer_b, input_b, flops)
    activation_checks.checkpointing(r)  # every number shown, against the stack worked by hand
    return r


def _segments(r: Result, layers: list, x: torch.Tensor, layer_b: int, input_b: int, flops: dict) -> None:
    """Checkpoint every k layers (segments), and only the first n layers, on the transformer stack; and
    segments on a chain of one-tensor layers, where Chen et al.'s sqrt(L) optimum shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    L = len(layers)
    seg_rows, seg_pts, part_pts = [], [], []
    for seg in (1, 2, 4, 8, 16):
        run = measure_stack(layers, x, checkpointed=L, segment=seg)
        expected = stack_peak_bytes(L, seg, L, layer_b, input_b)
        r.claim(
            f"segments of {seg}: peak saved bytes",
            run["peak"],
            expected,
            unit="B",
            formula="max_j (j − 1) · input + len_j · layer",
        )
        seg_rows.append([seg, run["held"], run["peak"], expected, run["recomputed"]])
        seg_pts.append((run["recomputed"] / L, run["peak"], seg))
    for n in (0, 4, 8, 12, 16):
        run = measure_stack(layers, x, checkpointed=n)
        r.claim(
            f"first {n} layers checkpointed: peak saved bytes",
            run["peak"],
            stack_peak_bytes(L, 1, n, layer_b, input_b),
            unit="B",
        )
        r.claim(f"first {n} layers checkpointed: layer forwards recomputed", run["recomputed"], n)
        part_pts.append((run["recomputed"] / L, run["peak"]))
    r.table(
        "segments",
        [
            "segment length k",
            "saved after forward (B)",
            "peak saved (B)",
            "peak formula (B)",
            "layer forwards recomputed",
        ],
        seg_rows,
        caption=f"{L} blocks checkpointed in segments of k layers: the recompute is one forward whatever k",
    )
    # Chen et al.'s setting: layers that each keep one tensor the size of their input (tanh keeps its output).
    chain = [nn.Tanh() for _ in range(CHAIN)]
    z = torch.randn(1 << 14, device=x.device, dtype=DTYPE)
    unit = z.numel() * z.element_size()
    chain_rows = []
    for seg in (1, 2, 4, 8, 16, 32, 64):
        run = measure_stack(chain, z, checkpointed=CHAIN, segment=seg)
        expected = stack_peak_bytes(CHAIN, seg, CHAIN, unit, unit)
        r.claim(f"chain of {CHAIN}, segments of {seg}: peak saved bytes", run["peak"], expected, unit="B")
        chain_rows.append((seg, run["peak"] / unit))
    best = min(chain_rows, key=lambda c: c[1])[0]
    r.claim(f"chain of {CHAIN}: the best segment length is sqrt(L)", best, CHAIN**0.5)
    r.add("chain_layers", CHAIN, "", "layers of the one-tensor chain")
    r.add("chain_best_segment", best, "", "segment length with the lowest peak")
    r.add("chain_best_peak_units", dict(chain_rows)[best], "", "its peak, in layer inputs")
    r.add("chain_none_peak_units", CHAIN, "", "no checkpointing: one tensor per layer")
    tf_best = min(seg_pts, key=lambda p: p[1])
    r.add("stack_best_segment", tf_best[2], "", "transformer stack: segment length with the lowest peak")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    fig.subplots_adjust(wspace=0.3)
    ax1.plot([p[0] for p in part_pts], [p[1] / 1e6 for p in part_pts], "o-", label="checkpoint the first n layers")
    for xx, yy, seg in seg_pts:
        ax1.plot(xx, yy / 1e6, "s", color="C1")
        ax1.annotate(f"k={seg}", (xx, yy / 1e6), textcoords="offset points", xytext=(6, -3), fontsize=7)
    ax1.plot([], [], "s", color="C1", label="segments of k layers")
    ax1.set_xlabel("extra forward compute (fraction of one forward)")
    ax1.set_ylabel("peak saved activations (MB)")
    ax1.set_title(f"{L} transformer blocks (measured)", fontsize=9)
    ax1.legend(fontsize=7)
    ks = [c[0] for c in chain_rows]
    ax2.plot(ks, [c[1] for c in chain_rows], "o-", label=f"chain of {CHAIN} one-tensor layers (measured)")
    ax2.plot(
        [p[2] for p in seg_pts], [p[1] / input_b for p in seg_pts], "s-", label=f"{L} transformer blocks (measured)"
    )
    ax2.axvline(CHAIN**0.5, color="gray", ls=":", lw=0.8)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.yaxis.set_major_formatter(ScalarFormatter())
    ax2.yaxis.set_minor_formatter(NullFormatter())
    ax2.set_xlabel("segment length k (layers)")
    ax2.set_ylabel("peak saved, in layer inputs")
    ax2.set_title("one extra forward for every k: only the peak changes", fontsize=9)
    ax2.legend(fontsize=7)
    activation_checks.tradeoff_figure(r, fig)
    r.figure(
        "tradeoff",
        fig,
        "Memory against recompute. Left: peak saved activations vs extra forward compute. "
        "Right: peak vs segment length; the chain's optimum is sqrt(L), a transformer block keeps so much "
        "more than its input that one layer per segment is best",
    )
