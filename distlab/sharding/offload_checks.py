"""The cpu-offload experiment's numbers worked by hand: ZeRO-Offload's bytes (Ren et al. 2021, Figure 2) with the
(2, 2, 12) split typed out, the host's DRAM bandwidth from the sources' own sentences quoted and parsed here (so a
typo in host_links.toml or in a quote fails), PCIe 5.0 from its spec's rate and 128b/130b encoding written out,
never from distlab.sharding.offload or distlab.hardware.links."""

from __future__ import annotations

import re

from distlab.core.facts import value
from distlab.core.results import Result, worst_relative_gap

# The sources' statements, as host_links.toml's source details record the DGX guide's and Intel ARK's (a second
# transcription beside the fields), and JEDEC's module name for DDR5-4800, PC5-38400: 38,400 MB/s per channel.
QUOTES = {
    "dgx": "2 Intel Xeon Platinum 8480C CPUs, 2 TB system memory, 8 H100 SXM GPUs",
    "ark": "8 memory channels, DDR5 up to 4800 MT/s",
    "jedec": "DDR5-4800 modules are named PC5-38400",
}


def quoted(key: str, pattern: str) -> int:
    """The number `pattern`'s group captures in the quote `key`."""
    m = re.search(pattern, QUOTES[key])
    assert m is not None, (key, pattern)
    return int(m.group(1))


def host_bytes_per_s() -> float:
    """Sockets x channels x one channel's MB/s, every figure parsed from a quote."""
    sockets = quoted("dgx", r"^(\d+) Intel")
    channels = quoted("ark", r"^(\d+) memory channels")
    channel_mbytes = quoted("jedec", r"PC5-(\d+)")
    return sockets * channels * channel_mbytes * 1e6


def pcie_bytes_per_s() -> float:
    """PCIe 5.0 x16, one direction: 32 GT/s per lane x 16 lanes x 128/130 (encoding) / 8 bits."""
    return 32e9 * 16 * 128 / 130 / 8


def by_hand(r: Result, tokens: tuple[int, ...]) -> None:
    """Every number cpu-offload shows against the closed forms."""
    from distlab.models.shapes import published_params

    q = {k: v.value for k, v in r.quantities.items()}
    p = published_params("7B")
    assert p is not None
    n = quoted("dgx", r"(\d+) H100 SXM GPUs")
    s = p // n + (p % n > 0)  # ⌈Ψ/N⌉
    pcie, host = pcie_bytes_per_s(), host_bytes_per_s()
    peak = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    update = 2 + 12 + 12 + 2  # read bf16 gradient and fp32 master, m, v; write master, m, v and bf16 parameters

    def times(n: int, s: int) -> dict[str, float]:
        transfer = max(2 * s / pcie, 2 * n * 2 * s / host)
        cpu = n * s * update / host
        return {"swap_pcie_s": 12 * s / pcie, "swap_dram_s": 2 * n * 12 * s / host, "transfer_s": transfer,
                "cpu_update_s": cpu, "zero_offload_s": transfer + cpu}  # fmt: skip

    t = times(n, s)
    ref = t | {
        "gpus": n,
        "pcie_bytes_per_s": pcie,
        "host_bytes_per_s": host,
        "socket_bytes_per_s": host / quoted("dgx", r"^(\d+) Intel"),
        "cpu_adam_bytes_per_param": update,
        "swap_s": max(t["swap_pcie_s"], t["swap_dram_s"]),
        "optimizer_shard_bytes": 12 * s,
        "grad_shard_bytes": 2 * s,
        "freed_bytes": 14 * s,
        "z2_bytes": 2 * p + 14 * s,
        "z2_offload_bytes": 2 * p,
        "host_per_node_bytes": n * 14 * s,
        "breakeven_tokens_swap": max(t["swap_pcie_s"], t["swap_dram_s"]) * peak / (6 * p),
        "breakeven_tokens_zero_offload": t["zero_offload_s"] * peak / (6 * p),
        "one_gpu_bytes": 16 * p,
        "one_gpu_offload_bytes": 2 * p,
        "one_gpu_host_bytes": 14 * p,
        "one_gpu_offload_s": times(1, p)["zero_offload_s"],
        "one_gpu_transfer_s": times(1, p)["transfer_s"],
        "one_gpu_cpu_s": times(1, p)["cpu_update_s"],
    }
    ref["swap_over_offload"] = ref["swap_s"] / t["zero_offload_s"]
    r.claim(
        "offload's bytes, seconds and break-evens by hand (largest gap over quantities)",
        worst_relative_gap([(q[k], v) for k, v in ref.items()]),
        0.0,
        abs_tol=1e-12,
    )
    rows = []
    for row, tok in zip(r.tables["per_step"].rows, tokens, strict=True):
        c = 6 * p * tok / peak
        swap, zo = ref["swap_s"], t["zero_offload_s"]
        cells = [row[0], row[1].value, row[2].value, row[3], row[4].value, row[5]]
        rows += list(zip(cells, [tok, c, swap, swap / c, zo, zo / c], strict=True))
    r.claim("per-step table by hand (largest gap over cells)", worst_relative_gap(rows), 0.0, abs_tol=1e-12)
    r.claim(
        "host_links.toml's DRAM fields = the quoted sources' (sockets, channels, MB/s per channel)",
        value("host_links.DGX-H100-host.sockets")
        * value("host_links.Xeon-8480.memory_channels")
        * value("host_links.Xeon-8480.mtransfers_per_s")
        * value("host_links.Xeon-8480.channel_bytes")
        * 1e6,
        host,
        rel_tol=1e-12,
        unit="B/s",
    )
    r.claim("DGX H100's GPUs = the guide's 8", value("host_links.DGX-H100-host.gpus"), n)
