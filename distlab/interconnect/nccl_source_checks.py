"""interconnect.toml's NCCL tuner entries against NCCL's own source.

The latencies, bandwidth factors and caps in the `nccl-*` entries were typed by hand from src/graph/tuning.cc.
source_excerpts.toml holds the same lines of tuning.cc at both commits, copied by machine. Here each table is read by
its name from the C text and each refinement factor from the line that applies it, so a typo in a typed entry (or a
field typed from the wrong row) fails the claim that names it. Every numeric field of the checked entries must
have a reading here: a new field cannot slip past unread.
"""

from __future__ import annotations

import re

from distlab.core.facts import entries
from distlab.core.results import Result

PROTOCOLS = ("ll", "ll128", "simple")
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")  # tuning.cc's order
TRANSPORTS = ("nvlink", "pci", "net")
CHIPS = ("volta", "ampere", "hopper", "blackwell")  # the compute-capability rows of the per-chip tables
NUMBER = r"([0-9.][0-9. /*]*?)"  # a literal or a literal fraction ("1.0/3.8", "120.0 / 128.0")


def _code(text: str) -> str:
    """The C text without its comments (numbers in comments are not the code's)."""
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def _evaluate(expression: str) -> float:
    """A literal, a product or a quotient of literals as C writes them ("2*141.0", "1.0 / 3.8", "0.85f")."""
    expression = expression.replace("f", "").strip()
    if not re.fullmatch(r"[0-9.]+(\s*[*/]\s*[0-9.]+)*", expression):
        raise ValueError(f"not a literal expression: {expression!r}")
    numbers = [float(x) for x in re.split(r"\s*[*/]\s*", expression)]
    result = numbers[0]
    for op, x in zip(re.findall(r"[*/]", expression), numbers[1:]):
        result = result * x if op == "*" else result / x
    return result


def table(text: str, marker: str) -> list[float]:
    """The numbers of the brace-delimited initializer that follows `marker` (its first `{` to the matching `}`)."""
    start = text.index("{", text.index(marker))
    depth = 0
    for end in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            break
    block = _code(text[start : end + 1])
    literal = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)f?"
    return [_evaluate(x) for x in re.findall(rf"{literal}(?:\s*\*\s*{literal})?", block)]


def _rows(numbers: list[float], width: int) -> list[list[float]]:
    return [numbers[i : i + width] for i in range(0, len(numbers), width)]


def said(text: str, pattern: str, group: int = 1) -> float:
    """The literal `pattern` finds in the code (its group), evaluated."""
    found = re.search(pattern, _code(text))
    if found is None:
        raise ValueError(f"tuning.cc no longer says {pattern!r}")
    return _evaluate(found.group(group))


def latencies(text: str, base: str, hw: str, algorithms: int) -> dict[str, float]:
    """{entry suffix.field: µs} from baseLat and hwLat, named as interconnect.toml names them."""
    out = {}
    for a, row in zip(ALGORITHMS, _rows(table(text, base), 3)):
        out.update({f"base.base_{a}_{p}_us": x for p, x in zip(PROTOCOLS, row)})
    # interconnect.toml keeps one base latency for CollNet and one for NVLS: every protocol of both algorithms
    out["base.base_collnet_us"] = max(
        out[f"base.base_collnet_{k}_{p}_us"] for k in ("direct", "chain") for p in PROTOCOLS
    )
    out["base.base_nvls_us"] = max(out[f"base.base_nvls{k}_{p}_us"] for k in ("", "_tree") for p in PROTOCOLS)
    hw_rows = _rows(table(text, hw), 3)
    assert len(hw_rows) == len(TRANSPORTS) * algorithms, f"hwLat has {len(hw_rows)} rows"
    for i, transport in enumerate(TRANSPORTS):
        for a, row in zip(ALGORITHMS[:algorithms], hw_rows[i * algorithms : (i + 1) * algorithms]):
            out.update({f"{transport}.{a}_{p}_us": x for p, x in zip(PROTOCOLS, row)})
    return out


def per_chip(text: str, marker: str, field: str) -> dict[str, list[float]]:
    """A [chip][1 node, 2 nodes, more] table as {field_chip: row}."""
    return {f"{field}_{chip}": row for chip, row in zip(CHIPS, _rows(table(text, marker), 3))}


CAPS = {  # per-chip tables both commits print, by their C name
    "llMaxBws": "ll_max_gbytes_per_s",
    "perChMaxRingLL128Bws": "ring_ll128_max_gbytes_per_s_per_channel",
    "perChMaxTreeLL128Bws": "tree_ll128_max_gbytes_per_s_per_channel",
    "perChMaxTreeBws": "tree_max_gbytes_per_s_per_channel",
}


def _shared(text: str, entry: str) -> dict[str, object]:
    """The refinements and caps both commits print (whitespace aside): the tree's factors, its algbw ratio, the
    per-chip caps."""
    f = f"{entry}."
    out: dict[str, object] = {
        f + "tree_busbw_factor": said(
            text, rf"busBw\s*\*\s*{NUMBER},\s*graphs\[a\]->nChannels\s*\*\s*perChMaxTreeBw\)"
        ),
        f + "tree_ll_busbw_factor": said(text, rf"busBw\s*\*\s*{NUMBER},\s*llMaxBw\)"),
        f + "tree_ll128_busbw_factor_single_node": said(text, rf"nNodes == 1 \? {NUMBER} :"),
        f + "tree_ll128_busbw_factor_multi_node": said(text, rf"nNodes == 1 \? [0-9./ ]+ : {NUMBER}\)"),
        f + "pattern_tree_factor": said(text, rf"NCCL_TOPO_PATTERN_TREE\) busBw \*= {NUMBER};"),
        f + "tree_algbw_ratio": said(text, rf"else ratio \*= {NUMBER};"),
    }
    for name, field in CAPS.items():
        out.update({f + k: v for k, v in per_chip(text, name, field).items()})
    return out


def readings_v2_20(text: str) -> dict[str, object]:
    """Every typed field of the 2.20.3 entries, read from tuning.cc at b6475625."""
    lat = latencies(text, "baseLat", "hwLat [", 6)
    out: dict[str, object] = {f"nccl-latency-{k}": v for k, v in lat.items()}
    out.update(_shared(text, "nccl-factors-v2-20"))
    f = "nccl-factors-v2-20."
    out[f + "ring_ll_busbw_factor_multinode_or_reduce"] = said(text, rf"ncclFuncReduce\) \? {NUMBER} : ")
    out[f + "ring_ll_busbw_factor_single_node"] = said(text, rf"ncclFuncReduce\) \? [0-9./]+ : {NUMBER}\)")
    out[f + "ring_ll128_busbw_factor_one_gpu_per_node"] = said(text, rf"ppn < 2 \? {NUMBER} :")
    out[f + "ring_ll128_busbw_factor"] = said(text, rf"ppn < 2 \? [0-9.]+ : {NUMBER}\)")
    out[f + "nvls_algbw_ratio"] = said(text, rf"NCCL_ALGO_NVLS_TREE\) ratio \*= {NUMBER};")
    for vendor in ("intel", "amd"):
        out[f"nccl-net-overhead.net_overhead_{vendor}_us"] = said(text, rf"VENDOR_{vendor.upper()}\) return {NUMBER};")
    return out


def readings_v2_30(text: str) -> dict[str, object]:
    """Every typed field of the 2.30.7 entries, read from tuning.cc at 73cf1122."""
    lat = latencies(text, "// baseLatencies", "// hwLatencies", 7)
    out: dict[str, object] = {f"nccl-v2-30-latency-{k}": v for k, v in lat.items()}
    out.update(_shared(text, "nccl-factors-v2-30"))
    f = "nccl-factors-v2-30."
    out[f + "ring_ll_busbw_factor"] = said(text, rf"busBw = std::min\(llMaxBw, busBw \* {NUMBER}\)")
    out[f + "ring_ll128_busbw_factor"] = said(text, rf"busBw = std::min\(busBw \* \({NUMBER}\),")
    out[f + "pat_busbw_factor"] = said(text, rf"NCCL_ALGO_PAT\) busBw \*= {NUMBER};")
    out.update({f + f"nvls_efficiency_{chip}": x for chip, x in zip(CHIPS, table(text, "nvlsEfficiency["))})
    out.update(
        {
            f + k: v
            for k, v in per_chip(text, "// perChMaxNVLSTreeBws", "nvls_tree_max_gbytes_per_s_per_channel").items()
        }
    )
    return out


CHECKED = ("nccl-latency-", "nccl-v2-30-latency-", "nccl-factors-v2-", "nccl-net-overhead", "nccl-nvlink4", "nccl-smp-")
SMP_DEFINES = {  # nccl-smp-* entry -> topo.h's #define for that CPU's CPU-to-CPU link
    "intel-broadwell": "BDW_QPI_BW",
    "intel-skylake": "SKL_QPI_BW",
    "intel-sapphire-rapids": "SRP_QPI_BW",
    "intel-emerald-rapids": "ERP_QPI_BW",
    "amd": "AMD_BW",
}


def smp_bandwidths(text: str) -> dict[str, object]:
    """The CPU-to-CPU link bandwidths NCCL's graph search assumes (GB/s), from topo.h's #defines."""
    return {
        f"nccl-smp-{cpu}.inter_socket_gbytes_per_s": said(text, rf"#define {define} {NUMBER}\s")
        for cpu, define in SMP_DEFINES.items()
    }


def quoted_rates() -> dict[str, object]:
    """The one NCCL figure that is not in tuning.cc: the effective NVLink 4 rate, as its maintainer's answer says it."""
    from distlab.core.facts import quoted

    path = "nccl-nvlink4.effective_gbytes_per_s"
    return {path: quoted(f"interconnect.{path}", r"effective ([0-9]+) GB/s")}


def mismatches() -> list[str]:
    """Each typed field of the checked entries that differs from tuning.cc or has no reading there."""
    source = entries("source_excerpts")
    read = {
        **readings_v2_20(source["nccl-tuning-v2-20"]["text"]),
        **readings_v2_30(source["nccl-tuning-v2-30"]["text"]),
        **quoted_rates(),
        **smp_bandwidths(source["nccl-topo-v2-30"]["text"]),
    }
    wrong = []
    for entry, row in entries("interconnect").items():
        if not entry.startswith(CHECKED):
            continue
        for field, typed in row.items():
            if isinstance(typed, bool) or not isinstance(typed, (int, float, list)):
                continue
            key = f"{entry}.{field}"
            if key not in read:
                wrong.append(f"{key} = {typed}: no reading in tuning.cc")
            elif typed != read[key]:  # exact: the typed decimals are what the C's literal fractions evaluate to
                wrong.append(f"{key} = {typed}, tuning.cc says {read[key]}")
    return wrong


def nccl_source_claim(r: Result) -> None:
    """Claim every typed NCCL tuner field against tuning.cc as copied by machine (source_excerpts.toml)."""
    wrong = mismatches()
    r.claim(
        "interconnect.toml's NCCL latencies, bandwidth factors and caps = tuning.cc's tables and lines at the pinned "
        "commits, the CPU-to-CPU link bandwidths = topo.h's, and NCCL's effective NVLink 4 rate = its maintainer's "
        "(fields that differ: " + ("; ".join(wrong) or "none") + ")",
        len(wrong),
        0,
        formula="hwLat, baseLat, llMaxBws, perChMax*Bws, nvlsEfficiency and each busBw refinement, read from the C",
    )
