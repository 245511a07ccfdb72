"""ddp-bucket-view: what DDP's `gradient_as_bucket_view` saves, measured on real gloo processes.

DDP all-reduces gradients in flat buckets (ddp-buckets). By default each parameter's `.grad` is its own tensor
and the Reducer copies it into the bucket before the all-reduce and back after: the gradients exist twice, as
`.grad` and as the buckets. With `gradient_as_bucket_view=True` each `.grad` is a view into its bucket: one
copy, Ψ x 4 bytes fewer for fp32 gradients, and no copies either way.

The experiment registers a communication hook that keeps every bucket's flat buffer, runs one step under each
setting, and counts the distinct storages that hold gradients: the buckets' and the `.grad`s' (a view shares its
bucket's storage, so it is counted once). The gradients themselves must come out identical bit for bit.
"""

from __future__ import annotations

import torch

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.models.gpt import GPT, GPTConfig, param_count, random_batch
from distlab.runtime.launcher import launch

CFG = GPTConfig(tie_embeddings=False)
WORLD = 2
BUCKET_CAP_MB = 0.25  # several buckets for a 0.7 MB model


def bucket_view_rank(rank: int, world: int, device: str) -> dict:
    """One DDP step per setting: the bytes of gradient storage (buckets and .grads, each storage once), the
    buckets' bytes alone, whether every .grad lies inside a bucket, and the gradients."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    torch.set_num_threads(1)
    dev = f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu"
    out = {}
    for view in (False, True):
        torch.manual_seed(0)
        model = GPT(CFG).to(dev)
        net = torch.nn.parallel.DistributedDataParallel(
            model, gradient_as_bucket_view=view, bucket_cap_mb=BUCKET_CAP_MB
        )
        buffers = []

        def hook(state, bucket, buffers=buffers):
            buffers.append(bucket.buffer())
            return allreduce_hook(None, bucket)

        net.register_comm_hook(None, hook)
        x, y = random_batch(CFG, 2, seed=100 + rank, device=dev)
        net(x, y).backward()
        storages = {}
        for t in [*buffers, *(p.grad for p in model.parameters())]:
            s = t.untyped_storage()
            storages[s.data_ptr()] = s.nbytes()
        bucket_ptrs = {b.untyped_storage().data_ptr() for b in buffers}
        out[view] = {
            "grad_storage_bytes": sum(storages.values()),
            "bucket_bytes": sum(b.untyped_storage().nbytes() for b in buffers),
            "buckets": len(buffers),
            "grads_in_buckets": all(p.grad.untyped_storage().data_ptr() in bucket_ptrs for p in model.parameters()),
            "grads": torch.cat([p.grad.detach().reshape(-1).cpu() for p in model.parameters()]),
        }
    return out


@experiment(
    "ddp-bucket-view",
    "DDP gradient_as_bucket_view on 2 gloo processes: gradient memory with and without, gradients identical",
)
def ddp_bucket_view(device: str) -> Result:
    r = Result("ddp-bucket-view")
    n = param_count(CFG)
    ranks = launch(bucket_view_rank, WORLD, device, device=device, timeout_s=180)
    x = ranks[0]
    off, on = x[False], x[True]
    rows = [
        ["gradient_as_bucket_view=False", off["buckets"], off["bucket_bytes"], off["grad_storage_bytes"], "no"],
        [
            "gradient_as_bucket_view=True",
            on["buckets"],
            on["bucket_bytes"],
            on["grad_storage_bytes"],
            "yes" if on["grads_in_buckets"] else "no",
        ],
    ]
    r.table(
        "memory",
        [
            "setting",
            "buckets",
            "bucket bytes",
            "gradient storage (buckets + .grad, each once)",
            ".grad inside a bucket",
        ],
        rows,
        caption=f"Rank 0 of {WORLD} gloo processes after the first backward, {n:,} fp32 parameters (the first "
        "iteration packs every gradient into one bucket; later ones rebuild buckets of the cap from the ready "
        "order, the same bytes); storages counted by address, so a view is not counted twice.",
    )
    psi = 4 * n
    r.add("world", WORLD, "processes", "gloo processes")
    r.add("params", n, "params", "parameters Ψ")
    r.add("off_bytes", off["grad_storage_bytes"], "B", "gradient storage without the view")
    r.add("on_bytes", on["grad_storage_bytes"], "B", "gradient storage with the view")
    r.add("saved_bytes", off["grad_storage_bytes"] - on["grad_storage_bytes"], "B", "what the view saves")
    r.claim("buckets hold every gradient once: bucket bytes = 4Ψ", on["bucket_bytes"], psi, unit="B", formula="4 B x Ψ")
    r.claim("without the view: .grad and buckets = 2 x 4Ψ", off["grad_storage_bytes"], 2 * psi, unit="B")
    r.claim("with the view: one copy, 4Ψ", on["grad_storage_bytes"], psi, unit="B")
    r.claim("the view saves one copy, 4Ψ", r.quantities["saved_bytes"].value, psi, unit="B")
    r.claim("with the view every .grad lies in a bucket's storage", on["grads_in_buckets"], True)
    r.claim("without it no .grad does", off["grads_in_buckets"], False)
    diff = max(float((y[True]["grads"] - y[False]["grads"]).abs().max()) for y in ranks)
    r.claim("gradients identical with and without the view (same buckets, same order)", diff, 0.0)
    spread = float((ranks[0][True]["grads"] - ranks[1][True]["grads"]).abs().max())
    r.claim("every rank holds the same averaged gradients", spread, 0.0)
    return r
