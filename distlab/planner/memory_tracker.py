"""An independent check of the planner's phase memory: PyTorch's own memory tracker run on the library's decoder.

`torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker` counts every tensor a training step creates, by
category (sharded and unsharded parameters, gradients, optimizer state, activations, temporaries, FSDP2's all-gather
and reduce-scatter buffers), and records the peak. Under `FakeTensorMode` with the `fake` process group it runs the
real model code at full width on a CPU with no GPU and one process: the decoder (distlab.models.decoder.DecoderBlock
layers between an embedding and an untied head, the loss torchtitan computes) is built on the meta device,
`fully_shard`-ed per layer and at the root, materialised with `to_empty`, and stepped twice (AdamW, foreach off: the
for-loop update makes no temporaries); the second step's peak is read.

What it cannot see, and the planner adds beside the allocator: NCCL's buffers, the CUDA context, the caching
allocator's fragmentation. So the claim compares like with like: the planner's allocator peak (its largest phase)
against the tracker's total at its peak. The depth is reduced (2 layers of each model's width) to keep the run to
seconds; every per-layer quantity is full size, and the planner is asked about the same 2-layer model.
"""

from __future__ import annotations

import re
from dataclasses import replace

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.models.shapes import ModelShape, preset
from distlab.planner.config import Plan, Training, cluster
from distlab.planner.memory import memory_per_gpu

WORLD = 8
LAYERS = 2
PEAK_REL_TOL = 0.10  # the issue's bar for "within 10 %": the loss's and FSDP2's own buffers are modelled, not fitted
STATE_REL_TOL = 0.01  # FSDP2 pads each tensor's first dimension to a multiple of the world: well under 1 % here
CONFIGS = (("7B", 4096), ("13B", 4096), ("70B", 4096))  # the chapters' fine-tunes and a 70B shard


def tracked_peak(m: ModelShape, seq: int, world: int = WORLD, lora_rank: int = 0) -> dict[str, float]:
    """The tracker's peak snapshot of one rank (bytes by category, and "total") for a pure-bf16 FSDP2 step of model
    `m` (its own depth) at micro-batch 1 of `seq` tokens."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    torch.set_num_threads(1)
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (world,))  # outside FakeTensorMode: inside it fails
        with FakeTensorMode():
            model = _bf16_decoder(m, seq)
            if lora_rank:
                _add_lora(model, lora_rank)
            for layer in model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            model.to_empty(device="cpu")
            trained = [w for w in model.parameters() if w.requires_grad]
            opt = torch.optim.AdamW(trained, foreach=False)
            tokens = torch.randint(0, m.vocab, (1, seq))
            labels = torch.randint(0, m.vocab, (1, seq))
            tracker = FSDPMemTracker(model, opt)
            tracker.track_inputs((tokens, labels))
            with tracker:
                for i in range(2):
                    pred = model(tokens)
                    loss = nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten())
                    del pred  # torchtitan's train step drops the logits before backward
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                    if i == 0:
                        tracker.reset_mod_stats()
                snap = tracker.get_tracker_snapshot("peak")
    finally:
        dist.destroy_process_group()
    (cats,) = snap.values()
    return {str(k).split(".")[-1].lower(): float(v) for k, v in cats.items()}


def _bf16_decoder(m: ModelShape, seq: int):
    """The library's decoder (DecoderBlock layers between an embedding and an untied head) on the meta device, in
    pure bf16 (torchtune's default), RoPE's tables cast as model.to(bf16) would."""
    import torch
    from torch import nn

    from distlab.models.decoder import DecoderBlock

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(m.vocab, m.hidden)
            self.layers = nn.ModuleList(
                DecoderBlock(m.block(), attention="sdpa", dropout=0.0, max_seq=seq) for _ in range(m.layers)
            )
            self.norm = nn.RMSNorm(m.hidden)
            self.head = nn.Linear(m.hidden, m.vocab, bias=False)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embed(tokens)  # (B, S, h)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))  # (B, S, V)

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = Decoder()
    finally:
        torch.set_default_dtype(default)
    for mod in model.modules():
        for name, buf in list(mod.named_buffers(recurse=False)):
            setattr(mod, name, buf.to(torch.bfloat16))
    return model


def _add_lora(model, rank: int) -> None:
    """LoRA on every linear map of every layer (attention's q, k, v, o and the MLP's), as QLoRA adapts them: the
    base frozen, y = W x + B (A x) with A (r x d_in) and B (d_out x r) trained; embedding and head frozen too."""
    import torch
    from torch import nn

    class LoRALinear(nn.Module):
        def __init__(self, base: nn.Linear) -> None:
            super().__init__()
            self.base = base
            with torch.device("meta"):
                self.lora_a = nn.Linear(base.in_features, rank, bias=False, dtype=torch.bfloat16)
                self.lora_b = nn.Linear(rank, base.out_features, bias=False, dtype=torch.bfloat16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(x) + self.lora_b(self.lora_a(x))

    for w in model.parameters():
        w.requires_grad_(False)
    for layer in model.layers:
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(parent, name, LoRALinear(child))


def tracked_peak_ddp(m: ModelShape, seq: int) -> dict[str, float]:
    """The tracker's peak for one data-parallel replica's step (MemTracker on the unsharded model, pure bf16,
    micro-batch 1 of `seq` tokens). DDP's own all-reduce buckets are outside what a single replica allocates, so
    the comparison leaves them out on both sides."""
    import torch
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    torch.set_num_threads(1)
    with FakeTensorMode():
        model = _bf16_decoder(m, seq)
        for mod in model.modules():  # to_empty cannot swap an unsharded module's fake tensors: replace them
            for name, w in list(mod.named_parameters(recurse=False)):
                setattr(mod, name, nn.Parameter(torch.empty(w.shape, dtype=w.dtype), requires_grad=w.requires_grad))
            for name, buf in list(mod.named_buffers(recurse=False)):
                setattr(mod, name, torch.empty(buf.shape, dtype=buf.dtype))
        opt = torch.optim.AdamW(model.parameters(), foreach=False)
        tokens = torch.randint(0, m.vocab, (1, seq))
        labels = torch.randint(0, m.vocab, (1, seq))
        tracker = MemTracker()
        tracker.track_external(model, opt)
        with tracker:
            for i in range(2):
                pred = model(tokens)
                loss = nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten())
                del pred
                loss.backward()
                opt.step()
                opt.zero_grad()
                if i == 0:
                    tracker.reset_mod_stats()
            snap = tracker.get_tracker_snapshot("peak")
    (cats,) = snap.values()
    return {str(k).split(".")[-1].lower(): float(v) for k, v in cats.items()}


def planner_view(m: ModelShape, seq: int, world: int = WORLD):
    """The planner's memory for the same step: pure bf16, FSDP2 (ZeRO-3) over `world` GPUs, micro-batch 1."""
    t = Training(global_batch_tokens=world * seq, seq=seq, precision="bf16", framework="fsdp2", task="finetune")
    return memory_per_gpu(m, cluster("H100-SXM", gpus_per_node=world), t, Plan(dp=world, zero=3))


@experiment(
    "memory-tracker",
    "PyTorch's FSDPMemTracker under FakeTensorMode on the library's decoder (7B, 13B and 70B widths, 2 layers, "
    "FSDP2 on 8 ranks, pure bf16) against the planner's phase memory for the same step",
)
def memory_tracker(device: str) -> Result:
    r = Result("memory-tracker")
    rows = []
    for name, seq in CONFIGS:
        m = replace(preset(name), layers=LAYERS)
        got = tracked_peak(m, seq)
        plan = planner_view(m, seq)
        key = name.lower()
        r.add(f"tracker_peak_{key}", got["total"], "B", f"{name} width, {LAYERS} layers: the tracker's peak (one rank)")
        r.add(f"planner_peak_{key}", plan.allocator_peak_bytes, "B", "the planner's allocator peak, same step")
        r.add(f"peak_ratio_{key}", plan.allocator_peak_bytes / got["total"], "", "planner / tracker")
        r.claim(
            f"{name} width: the planner's allocator peak is the tracker's within {PEAK_REL_TOL:.0%}",
            plan.allocator_peak_bytes,
            got["total"],
            rel_tol=PEAK_REL_TOL,
            unit="B",
            formula="FSDPMemTracker peak snapshot, total",
        )
        r.claim(
            f"{name} width: sharded bf16 weights, 2 B x params / {WORLD}",
            plan.weights,
            got["sharded_param"],
            rel_tol=STATE_REL_TOL,
            unit="B",
            formula="FSDPMemTracker SHARDED_PARAM",
        )
        r.claim(
            f"{name} width: bf16 AdamW moments, 4 B x params / {WORLD}",
            plan.optimizer,
            got["opt"],
            rel_tol=STATE_REL_TOL,
            unit="B",
            formula="FSDPMemTracker OPT",
        )
        r.claim(
            f"{name} width: the layers gathered at the peak (FSDP2's unsharded parameters and all-gather buffers)",
            _gathered_at_peak(plan),
            got["unsharded_param"] + got["all_gather"],
            rel_tol=STATE_REL_TOL,
            unit="B",
            formula="FSDPMemTracker UNSHARDED_PARAM + ALL_GATHER",
        )
        _ratio_read_back(r, f"{name} width", r.quantities[f"peak_ratio_{key}"].value, got, plan)
        rows.append(_row(r, f"{name} width, {LAYERS} layers, seq {seq}", got, plan, _loss_bytes(m, seq)))
    _ddp(r)
    rows += _lora(r)
    r.table(
        "tracker",
        [
            f"step (FSDP2, {WORLD} ranks, pure bf16)",
            "tracker peak GB",
            "planner peak GB (phase)",
            "weights + optimizer GB (tracker / planner)",
            "gathered layers GB",
            "activations, logits, temporaries GB",
        ],
        rows,
        caption="Measured on this machine's CPU under FakeTensorMode (tensor bytes, no GPU): PyTorch's "
        "FSDPMemTracker against the planner. Neither counts NCCL's buffers, the CUDA context or fragmentation.",
    )
    return r


def _ratio_read_back(r: Result, label: str, shown: float, got: dict[str, float], plan) -> None:
    """A planner / tracker ratio the page quotes, read back: times the tracker's peak it gives the planner's."""
    r.claim(
        f"{label}: the ratio shown x the tracker's peak = the planner's peak",
        shown * got["total"],
        plan.allocator_peak_bytes,
        rel_tol=1e-12,
        unit="B",
    )


def _loss_bytes(m: ModelShape, seq: int) -> float:
    """torchtitan's eager cross-entropy on fp32 logits at the loss's backward: its bytes per logit (memory_buffers.toml,
    from the ops its source lists) x the sequence's logits."""
    from distlab.core.facts import value

    return float(value("memory_buffers.loss-eager.backward_bytes_per_logit")) * seq * m.vocab


def _row(
    r: Result, label: str, got: dict[str, float], plan, loss: float, state_tol: float = STATE_REL_TOL
) -> list[str]:
    """One row of the tracker table in GB (tracker / planner), read back: every number it prints within half a unit
    of the bytes it stands for."""
    values = [
        got["total"],
        plan.allocator_peak_bytes,
        got["sharded_param"] + got["opt"],
        plan.weights + plan.optimizer,
        got["unsharded_param"] + got["all_gather"],
        _gathered_at_peak(plan),
        got["act"] + got["temp"],
        plan.activations + plan.logits + plan.logits_backward,
    ]
    rest = sum(got[k] for k in ("buffer", "sharded_grad", "unsharded_grad", "reduce_scatter", "inp"))
    r.claim(
        f"{label}: the tracker's three columns and its other categories add up to its peak",
        values[0] - values[2] - values[4] - values[6] - rest,
        0.0,
        abs_tol=1.0,
        unit="B",
        formula="FSDPMemTracker's categories partition its peak snapshot",
    )
    r.claim(
        f"{label}: weights + optimizer, the planner's = the tracker's within {state_tol:.0%}",
        values[3],
        values[2],
        rel_tol=state_tol,
        unit="B",
    )
    r.claim(
        f"{label}: the planner's activations, logits and temporaries = its activations + the loss's logits",
        values[7],
        plan.activations + loss,
        rel_tol=1e-12,
        unit="B",
    )
    gb = [v / 1e9 for v in values]
    row = [
        label,
        f"{gb[0]:.2f}",
        f"{gb[1]:.2f} ({plan.peak_phase})",
        f"{gb[2]:.2f} / {gb[3]:.2f}",
        f"{gb[4]:.2f} / {gb[5]:.2f}",
        f"{gb[6]:.2f} / {gb[7]:.2f}",
    ]
    return _read_back(r, label, row, values)


def _read_back(r: Result, label: str, row: list[str], values: list[float]) -> list[str]:
    """Claim every number a row prints after its label within half a unit (0.01 GB) of the bytes it stands for."""
    printed = [float(x) for x in re.findall(r"-?\d+\.\d+", " ".join(row[1:]))]
    r.claim(
        f"{label}: every GB figure the row prints = its bytes / 10^9, to the printed 0.01",
        max(abs(p - v / 1e9) for p, v in zip(printed, values, strict=True)),
        0.005,
        relation="<=",
        unit="GB",
    )
    return row


def _gathered_at_peak(plan) -> float:
    """What the planner holds gathered (FSDP2's root and layers) at its backward peak's moment."""
    bwd = plan.by_phase()["backward"]
    return bwd.get("gather buffers", 0.0) + bwd.get("root gathered", 0.0)


def _ddp(r: Result) -> None:
    """DDP (one replica, unsharded, pure bf16): the tracker's peak is at the loss's backward, before any gradient
    exists. Like with like: the planner's moment of the loss's backward (backward_start) against the tracker's peak;
    the planner's own peak, at backward's end with every gradient and DDP's bucket copy (no DDP wrapper runs here,
    so the tracker cannot see the buckets), is shown beside it."""
    rows = []
    for name, seq in CONFIGS[:2]:
        m = replace(preset(name), layers=LAYERS)
        got = tracked_peak_ddp(m, seq)
        t = Training(global_batch_tokens=WORLD * seq, seq=seq, precision="bf16", framework="fsdp2", task="finetune")
        plan = memory_per_gpu(m, cluster("H100-SXM", gpus_per_node=WORLD), t, Plan(dp=WORLD, zero=0))
        at_loss = plan.backward_start
        key = name.lower()
        r.add(f"ddp_tracker_peak_{key}", got["total"], "B", f"{name} width, DDP replica: the tracker's peak")
        r.add(f"ddp_planner_at_loss_{key}", at_loss, "B", "the planner's backward before any gradient exists")
        r.add(f"ddp_overcount_{key}", plan.allocator_peak_bytes / got["total"], "", "planner's peak / tracker's")
        _ratio_read_back(r, f"{name} width, DDP", r.quantities[f"ddp_overcount_{key}"].value, got, plan)
        r.claim(
            f"{name} width, DDP: the planner's state at the loss's backward is the tracker's peak within "
            f"{PEAK_REL_TOL:.0%}",
            at_loss,
            got["total"],
            rel_tol=PEAK_REL_TOL,
            unit="B",
            formula="MemTracker peak snapshot, total",
        )
        r.claim(
            f"{name} width, DDP: bf16 weights and AdamW moments, 2 + 4 B x params",
            plan.weights + plan.optimizer,
            got["param"] + got["opt"],
            rel_tol=STATE_REL_TOL,
            unit="B",
            formula="MemTracker PARAM + OPT",
        )
        r.claim(
            f"{name} width, DDP: the planner's peak is at least the tracker's (DDP's bucket copy, which it cannot see)",
            plan.allocator_peak_bytes,
            got["total"],
            relation=">=",
            unit="B",
        )
        values = [got["total"], at_loss, plan.allocator_peak_bytes, plan.gradients + plan.grad_buckets]
        r.claim(
            f"{name} width, DDP: gradients and DDP's bucket copy, 2 x 2 B (bf16) x params",
            values[3],
            2 * 2 * m.params(),
            rel_tol=1e-12,
            unit="B",
        )
        row = [f"{name} width, {LAYERS} layers, seq {seq}"] + [f"{v / 1e9:.2f}" for v in values]
        rows.append(_read_back(r, "DDP: " + row[0], row, values))
    r.table(
        "ddp",
        [
            "step (one DDP replica, pure bf16)",
            "tracker peak GB",
            "planner at the loss's backward GB",
            "planner peak GB",
            "gradients + DDP buckets GB",
        ],
        rows,
        caption="Measured on this machine's CPU under FakeTensorMode: PyTorch's MemTracker on one replica's step "
        "(no DDP wrapper: its buckets are the planner's alone) against the planner.",
    )


LORA_RANK = 16


def _lora(r: Result) -> list[list[str]]:
    """LoRA (rank 16 on every linear map, base and embeddings frozen, FSDP2 on 8 ranks, pure bf16): the planner's
    allocator peak against the tracker's, and the adapters' AdamW moments against its optimizer state."""
    rows = []
    r.add("lora_rank", LORA_RANK, "", "the adapters' rank in the LoRA runs")
    r.add("world", WORLD, "ranks", "the FSDP2 ranks every run shards over (an input)")
    r.add("layers", LAYERS, "layers", "the decoder layers each run keeps of its width (an input)")
    for name, seq in CONFIGS[:2]:
        m = replace(preset(name), layers=LAYERS)
        got = tracked_peak(m, seq, lora_rank=LORA_RANK)
        t = Training(
            global_batch_tokens=WORLD * seq,
            seq=seq,
            precision="bf16",
            framework="fsdp2",
            task="finetune",
            peft="lora",
            lora_rank=LORA_RANK,
        )
        plan = memory_per_gpu(m, cluster("H100-SXM", gpus_per_node=WORLD), t, Plan(dp=WORLD, zero=3))
        key = name.lower()
        r.add(f"lora_tracker_peak_{key}", got["total"], "B", f"{name} width, LoRA r = {LORA_RANK}: the tracker's peak")
        r.add(f"lora_peak_ratio_{key}", plan.allocator_peak_bytes / got["total"], "", "planner / tracker, LoRA")
        _ratio_read_back(r, f"{name} width, LoRA", r.quantities[f"lora_peak_ratio_{key}"].value, got, plan)
        ratio = plan.allocator_peak_bytes / got["total"]
        if abs(ratio - 1) <= PEAK_REL_TOL:
            r.claim(
                f"{name} width, LoRA: the planner's allocator peak is the tracker's within {PEAK_REL_TOL:.0%}",
                plan.allocator_peak_bytes,
                got["total"],
                rel_tol=PEAK_REL_TOL,
                unit="B",
                formula="FSDPMemTracker peak snapshot, total",
            )
        else:  # a miss, shown: the claim holds its direction (the planner above the tracker) and that it misses
            r.claim(
                f"{name} width, LoRA: the planner's allocator peak over-counts the tracker's by more than "
                f"{PEAK_REL_TOL:.0%} (on the safe side)",
                ratio - 1,
                PEAK_REL_TOL,
                relation=">=",
                formula="FSDPMemTracker peak snapshot, total",
            )
        r.claim(
            f"{name} width, LoRA: the adapters' bf16 AdamW moments, 4 B x r (d_in + d_out) per linear map / {WORLD}",
            plan.optimizer,
            got["opt"],
            rel_tol=0.05,  # FSDP2 pads each small adapter's first dimension to a multiple of the world
            unit="B",
            formula="FSDPMemTracker OPT",
        )
        rows.append(
            _row(r, f"{name} width, LoRA r = {LORA_RANK}", got, plan, _loss_bytes(m, seq), state_tol=0.05)
        )  # adapters padded
    return rows
