"""Where the bytes of an AdamW step go: counted from real tensors after a real training step.

Mixed precision (the ZeRO paper's convention, Rajbhandari et al. 2020, Section 3.1): bf16 weights and
gradients for forward and backward, an fp32 master copy that the optimizer updates, and fp32 Adam
moments m and v: 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter. Plain fp32 AdamW: 4 + 4 + 4 + 4 = 16.
"""

from __future__ import annotations

import itertools
import math

import torch

from distlab.core.experiments import experiment
from distlab.core.facts import fact, value
from distlab.core.results import Quantity, Result
from distlab.memory.activations import published_bytes_per_layer
from distlab.memory.model_states import BYTES_PER_PARAM, STEP_COUNTER_BYTES, add_state_bytes, model_state_bytes
from distlab.models.gpt import GPT, GPTConfig, param_count, random_batch, reference_logits
from distlab.models.published import claim_presets, llama2_context
from distlab.models.shapes import presets, published_params

SMALL = GPTConfig()  # the small model the book trains (its defaults): chapters 1, 4 and 5 state its shape


def _storage_bytes(tensors, seen: set[int]) -> int:
    """Bytes of the distinct storages behind `tensors` (a tied weight or a view counts once)."""
    total = 0
    for t in tensors:
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def measure_mixed(cfg: GPTConfig = SMALL, steps: int = 2, seed: int = 0) -> dict[str, int]:
    """Real mixed-precision AdamW steps; returns bytes by category from the tensors' storage."""
    torch.manual_seed(seed)
    model = GPT(cfg).to(torch.bfloat16)
    params = list(model.parameters())
    master = [p.detach().float().clone().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(master, lr=1e-3)
    transient = 0
    for step in range(steps):
        x, y = random_batch(cfg, 4, seed=seed + step)
        for p in params:  # keep the bf16 gradient buffers alive, as DDP's buckets do
            if p.grad is not None:
                p.grad.zero_()
        model(x, y).backward()
        for mp, p in zip(master, params):
            mp.grad = p.grad.float()  # transient fp32 copy for the update
        transient = _storage_bytes([mp.grad for mp in master], set())
        opt.step()
        with torch.no_grad():
            for mp, p in zip(master, params):
                p.copy_(mp)  # round the updated master weights back to bf16
                mp.grad = None
    seen: set[int] = set()
    state = [opt.state[mp] for mp in master]
    return {
        "weights (bf16)": _storage_bytes(params, seen),
        "gradients (bf16)": _storage_bytes([p.grad for p in params], seen),
        "master weights (fp32)": _storage_bytes(master, seen),
        "Adam m (fp32)": _storage_bytes([s["exp_avg"] for s in state], seen),
        "Adam v (fp32)": _storage_bytes([s["exp_avg_sq"] for s in state], seen),
        "step counters": _storage_bytes([s["step"] for s in state], seen),
        "transient fp32 gradients": transient,
        "tensors": len(params),
    }


def measure_fp32(cfg: GPTConfig = SMALL, steps: int = 2, seed: int = 0) -> dict[str, int]:
    torch.manual_seed(seed)
    model = GPT(cfg)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    for step in range(steps):
        x, y = random_batch(cfg, 4, seed=seed + step)
        opt.zero_grad(set_to_none=False)
        model(x, y).backward()
        opt.step()
    seen: set[int] = set()
    state = [opt.state[p] for p in params]
    return {
        "weights (fp32)": _storage_bytes(params, seen),
        "gradients (fp32)": _storage_bytes([p.grad for p in params], seen),
        "Adam m (fp32)": _storage_bytes([s["exp_avg"] for s in state], seen),
        "Adam v (fp32)": _storage_bytes([s["exp_avg_sq"] for s in state], seen),
        "step counters": _storage_bytes([s["step"] for s in state], seen),
        "tensors": len(params),
    }


@experiment("adamw-bytes", "bytes per parameter of a real mixed-precision and fp32 AdamW step, by category")
def adamw_bytes(device: str) -> Result:
    r = Result("adamw-bytes")
    n = param_count(SMALL)
    r.add("model_params", n, "params", "parameters of the small model (closed form)")
    r.add("model_layers", SMALL.layers, "", "layers")
    r.add("model_hidden", SMALL.hidden, "", "hidden width")
    r.add("model_heads", SMALL.heads, "", "attention heads")
    r.add("model_ffn", SMALL.ffn_width, "", "MLP width")
    r.add("model_vocab", SMALL.vocab, "", "vocabulary")
    r.add("model_seq", SMALL.seq, "", "sequence length")
    _forward_is_the_reference(r)
    mixed = measure_mixed()
    for precision, counts in (("mixed", mixed), ("fp32", measure_fp32())):
        rows, total = [], 0
        for cat, expected in BYTES_PER_PARAM[precision].items():
            per_param = counts[cat] / n
            total += counts[cat]
            r.claim(f"{precision}: {cat} bytes/param", per_param, expected, unit="B/param")
            rows.append([cat, counts[cat], per_param, expected])
        tensors = counts["tensors"]
        r.claim(
            f"{precision}: step counters = 4 B x parameter tensors",
            counts["step counters"],
            STEP_COUNTER_BYTES * tensors,
            unit="B",
            formula=f"{tensors} tensors",
        )
        rows.append(["step counters (per tensor)", counts["step counters"], counts["step counters"] / n, "—"])
        r.claim(
            f"{precision} table: step counters' bytes/param x parameters = 4 B x tensors",
            rows[-1][2] * n,
            STEP_COUNTER_BYTES * tensors,
            rel_tol=1e-12,
            unit="B",
        )
        per_param = total / n
        r.claim(
            f"{precision}: total bytes/param (without step counters)",
            per_param,
            sum(BYTES_PER_PARAM[precision].values()),
            unit="B/param",
        )
        r.add(f"{precision}_bytes_per_param", per_param, "B/param", f"{precision}: persistent bytes per parameter")
        r.add(f"{precision}_step_counter_bytes", counts["step counters"], "B", "step counters")
        r.add(f"{precision}_tensors", tensors, "", "parameter tensors")
        r.table(precision, ["category", "bytes measured", "bytes/param measured", "bytes/param formula"], rows)
    transient = mixed["transient fp32 gradients"] / n
    r.claim("mixed: transient fp32 gradient copies bytes/param", transient, 4, unit="B/param")
    r.add("transient_bytes_per_param", transient, "B/param", "transient fp32 gradients during the step")
    measured = {cat: mixed[cat] / n for cat in BYTES_PER_PARAM["mixed"]}  # bytes per parameter, real step
    claim_presets(r)
    _seven_b(r, measured)
    _dominance_figure(r, measured)
    return r


def _forward_is_the_reference(r: Result) -> None:
    """The small model is the transformer the pages say it is: its hand-written forward (which chapter 4's failure
    rates and chapter 3's saved tensors are measured on) against a float64 re-derivation with torch's own causal
    attention and functional ops, on the same weights."""
    torch.manual_seed(0)
    model = GPT(SMALL).double()
    idx, _ = random_batch(SMALL, 2)
    with torch.no_grad():
        ours, ref = model(idx), reference_logits(model, idx)
    r.claim(
        "small model: forward = float64 reference forward (SDPA, functional ops), max |diff| / max |logit|",
        float((ours - ref).abs().max() / ref.abs().max()),
        0.0,
        abs_tol=1e-12,
    )


def _seven_b(r: Result, measured: dict[str, float]) -> None:
    """The 7B estimate, each row with its formula, against one 80 GB GPU. `measured`: bytes per parameter by
    category from the real step above, the claims' reference beside the checkpoint's published count."""
    model = presets()["7B"]
    n = model.params()
    hbm = fact("gpus.H100-SXM.hbm_gb").value * 1e9
    r.add("7b_params", n, "params", f"{model.name} parameters")
    r.add("7b_params_billions", n / 1e9, "billion", f"{model.name} parameters, in billions")
    formulas = {
        "weights (bf16)": "2Ψ",
        "gradients (bf16)": "2Ψ",
        "master weights (fp32)": "4Ψ",
        "Adam m (fp32)": "4Ψ",
        "Adam v (fp32)": "4Ψ",
    }
    states = model_state_bytes(n, "mixed")
    rows = [[cat, formulas[cat], Quantity(states[cat], "B")] for cat in states]
    total = sum(states.values())
    rows.append(["**total (training)**", "16Ψ", Quantity(total, "B")])
    r.table("seven_b", ["category", "formula", "bytes"], rows, kind="computed")  # formulas only, nothing timed
    thirteen = presets()["13B"].params()
    r.add("13b_params", thirteen, "params", "Llama 2 13B parameters")
    r.add("13b_total_bytes", 16 * thirteen, "B", "13B model states, 16 B/param")
    r.add("7b_weights_bytes", states["weights (bf16)"], "B", "bf16 weights")
    r.add("7b_total_bytes", total, "B", "mixed-precision AdamW model states")
    r.add("7b_optimizer_bytes", 12 * n, "B", "master + m + v")
    r.add("7b_total_over_hbm", total / hbm, "", "model states / one 80 GB GPU")
    r.add("7b_min_gpus_states", -(-total // hbm), "GPUs", "GPUs needed to hold the states alone, sharded")
    r.add("7b_states_per_gpu_min", total / -(-total // hbm), "B", "states per GPU, sharded evenly over that many")
    r.add("7b_left_per_gpu_min", hbm - total / -(-total // hbm), "B", "HBM left per GPU beside those states")
    r.add("optimizer_share", 12 / 16, "fraction", "share of model states that is optimizer state")
    add_state_bytes(r)  # 16, 18 (Megatron's fp32 main_grad), 20 (an fp32 accumulation buffer beside bf16 gradients)
    # Inference: the weights plus the KV cache, K and V of every layer for every token in flight.
    per_token = 2 * model.layers * model.kv_heads * model.head_dim * 2  # K and V, bf16
    r.add("7b_kv_bytes_per_seq", per_token * model.seq, "B", f"KV cache of one {model.seq}-token sequence, bf16")
    fit = int((hbm - states["weights (bf16)"]) // (per_token * model.seq))
    r.add("7b_kv_seqs_fit", fit, "sequences", "full-length sequences whose KV cache fits beside the weights, one GPU")
    _seven_b_by_hand(r, measured, rows, fit)
    r.claim(
        "7B's KV cache per token = 4 L h bytes (Llama 2 7B has as many key/value heads as heads)",
        per_token,
        4 * model.layers * model.hidden,
        unit="B",
        formula="2 (K and V) x L x h x 2 bytes",
    )
    r.claim(
        "one more full-length sequence's KV cache would not fit beside the weights",
        (fit + 1) * 4 * model.layers * model.hidden * model.seq + 2 * n,
        hbm,
        relation=">=",
        unit="B",
    )


def _seven_b_by_hand(r: Result, measured: dict[str, float], rows: list, fit: int) -> None:
    """Each shown 7B and 13B number again, from the bytes per parameter the real step measured, the released
    checkpoints' counts and the datasheet's HBM (itself checked against the capacity nvidia-smi reports)."""
    q = {k: v.value for k, v in r.quantities.items()}
    seven, thirteen = published_params("7B"), published_params("13B")
    per_param = sum(measured.values())
    hbm_gb = fact("gpus.H100-SXM.hbm_gb").value
    reported = value("planner.capacity-H100-SXM.reported_mib") * 2**20
    r.claim(
        "H100 SXM: nvidia-smi's reported capacity is within 5 % below the datasheet's 80 GB read as GiB",
        reported / (hbm_gb * 2**30),
        0.975,
        abs_tol=0.025,
        formula="5 stacks of 16 GiB, a little kept by the driver (planner.toml, capacity-H100-SXM)",
    )
    hbm = hbm_gb * 10**9
    total = per_param * seven
    for cat, _, shown in rows[:-1]:
        r.claim(
            f"7B table: {cat} = measured B/param x count", shown.value, measured[cat] * seven, rel_tol=1e-12, unit="B"
        )
    r.claim(
        "7B table: total = measured 16 B/param x the checkpoint's count",
        rows[-1][2].value,
        total,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "7B in billions x 10^9 = the checkpoint's count",
        q["7b_params_billions"] * 10**9,
        seven,
        rel_tol=1e-12,
        unit="params",
    )
    r.claim("7B total model states = measured B/param x count", q["7b_total_bytes"], total, rel_tol=1e-12, unit="B")
    r.claim(
        "13B model states = measured B/param x count",
        q["13b_total_bytes"],
        per_param * thirteen,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim("13B parameters shown = the checkpoint's count", q["13b_params"], thirteen, unit="params")
    optimizer = sum(v for k, v in measured.items() if k.startswith(("master", "Adam")))
    r.claim(
        "7B optimizer bytes = measured master + m + v per param x count",
        q["7b_optimizer_bytes"],
        optimizer * seven,
        unit="B",
    )
    r.claim(
        "optimizer share = measured (master + m + v) / all model states", q["optimizer_share"], optimizer / per_param
    )
    r.claim("7B states / one GPU's HBM", q["7b_total_over_hbm"], total / hbm, rel_tol=1e-12)
    gpus = math.ceil(total / hbm)
    r.claim("GPUs to hold 7B's states = ceil(states / HBM)", q["7b_min_gpus_states"], gpus)
    r.claim("7B states per GPU over that many", q["7b_states_per_gpu_min"], total / gpus, rel_tol=1e-12, unit="B")
    r.claim("HBM left per GPU beside them", q["7b_left_per_gpu_min"], hbm - total / gpus, rel_tol=1e-12, unit="B")
    m = presets()["7B"]  # its layers and width are checked by its parameter count
    r.claim(
        "7B KV cache of one sequence = 2 (K, V) x 2 B x L x h x Table 1's 4k context",
        q["7b_kv_bytes_per_seq"],
        2 * 2 * m.layers * m.hidden * llama2_context(),
        unit="B",
    )
    r.claim(
        "the KV caches of all the sequences said to fit do fit beside the weights",
        fit * q["7b_kv_bytes_per_seq"] + measured["weights (bf16)"] * seven,
        hbm,
        relation="<=",
        unit="B",
    )


def _dominance_figure(r: Result, measured: dict[str, float], seq: int = 4096, batch: int = 1) -> None:
    """Each preset's training memory on one GPU by category; every bar read back from the drawing and claimed
    against the real step's bytes per parameter, the checkpoints' counts and the paper's activation components."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, shares = [], []
    cats = ["weights", "gradients", "optimizer (master + m + v)", f"activations (s={seq}, b={batch}, no recompute)"]
    for name, m in presets().items():
        n = m.params()
        act = m.layers * published_bytes_per_layer(seq, batch, m.hidden, m.heads)
        parts = [2 * n, 2 * n, 12 * n, act]
        names.append(f"{name}\n({n / 1e9:.1f}B)")
        shares.append([p / sum(parts) for p in parts])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bottom = [0.0] * len(names)
    for i, cat in enumerate(cats):
        vals = [s[i] for s in shares]
        ax.bar(names, vals, bottom=bottom, label=cat)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("share of training memory")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_ylim(0, 1)
    _claim_drawn_shares(r, ax, measured, seq, batch)
    r.figure(
        "share",
        fig,
        "Share of per-GPU training memory by category (mixed-precision AdamW, one GPU, "
        "activations from the published per-layer formula)",
    )
    r.data["shares"] = dict(zip([n.split("\n")[0] for n in names], shares))


def _claim_drawn_shares(r: Result, ax, measured: dict[str, float], seq: int, batch: int) -> None:
    """The bars as drawn (heights, stacking, labels, axis) against a second route: bytes per parameter from the
    real step, counts from the checkpoints (GPT-3: its shape, checked against Table 2.1), and Korthikanti et al.'s
    per-component activation bytes (Section 4.1: attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh)."""
    weights, grads = measured["weights (bf16)"], measured["gradients (bf16)"]
    optimizer = sum(v for k, v in measured.items() if k.startswith(("master", "Adam")))
    ax.figure.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    low, high = ax.get_ylim()
    r.claim("share figure: the axis spans all of memory, 0 to 1", max(abs(low), abs(high - 1)), 0.0)
    for j, (name, m) in enumerate(presets().items()):
        n = published_params(name) or m.params()
        s, b, h, a = seq, batch, m.hidden, m.heads
        act = m.layers * ((11 * s * b * h + 5 * a * s * s * b) + 19 * s * b * h + 4 * s * b * h)
        parts = [weights * n, grads * n, optimizer * n, act]
        tops = list(itertools.accumulate(p / sum(parts) for p in parts))
        bars = [container.patches[j] for container in ax.containers]
        drawn = [(bar.get_y(), bar.get_y() + bar.get_height()) for bar in bars]
        r.claim(
            f"share figure, {name}: every bar's base and top (largest difference)",
            max(abs(lo - e_lo) + abs(hi - e_hi) for (lo, hi), e_lo, e_hi in zip(drawn, [0.0, *tops[:-1]], tops)),
            0.0,
            abs_tol=1e-12,
        )
        billions = float(labels[j].split("(")[1].rstrip("B)"))
        r.claim(f"share figure, {name}: the label's billions", billions, round(n / 1e9, 1), abs_tol=1e-9)
