"""nccl-env: the reference an on-call engineer needs for NCCL and PyTorch's ProcessGroupNCCL, from nccl_debug.toml:
every environment variable with what it does, its default, when to set it and its source; what NCCL_DEBUG=INFO prints
(the transport a connection uses, and what a fallback to sockets looks like); the flight recorder's dump fields.

The tables are the data file's rows, each with its citation. The numbers the chapter derives from them (how long
InfiniBand retries before NCCL gives up, PyTorch's default collective timeout) are computed here and checked against
what the sources print.
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import entries, source, value
from distlab.core.results import Result


def _cite(entry: dict) -> str:
    return source("nccl_debug", entry["source"]).citation().replace("|", "\\|")  # a table cell


def ib_timeout_seconds(exponent: int | None = None) -> float:
    """One InfiniBand verbs ACK timeout: 4.096 µs x 2^NCCL_IB_TIMEOUT (the default exponent unless given)."""
    e = value("nccl_debug.env-NCCL_IB_TIMEOUT.default_value") if exponent is None else exponent
    return value("nccl_debug.env-NCCL_IB_TIMEOUT.base_us") * 1e-6 * 2**e


def ib_give_up_seconds(exponent: int | None = None, retries: int | None = None) -> float:
    """How long a dead InfiniBand peer stalls a rank before NCCL reports the error: timeout x retry count."""
    n = value("nccl_debug.env-NCCL_IB_RETRY_CNT.default_value") if retries is None else retries
    return ib_timeout_seconds(exponent) * n


@experiment(
    "nccl-env",
    "NCCL and PyTorch ProcessGroupNCCL environment variables, NCCL_DEBUG=INFO lines and flight-recorder fields, "
    "sourced; the IB retry and collective timeouts they imply",
    kind="computed",
)
def nccl_env(device: str) -> Result:
    r = Result("nccl-env", kind="computed")
    data = entries("nccl_debug")
    nccl, torch_rows = [], []
    for key, e in data.items():
        if not key.startswith("env-"):
            continue
        row = [f"`{e['name']}`", e["default"], e["what"], e["when"].removeprefix("editor: ") + _editor(e), _cite(e)]
        (nccl if e["name"].startswith("NCCL_") else torch_rows).append([e.get("category", "")] + row)
    nccl.sort(key=lambda x: (x[0] != "system configuration", x[1]))
    r.table(
        "nccl",
        ["NCCL's class", "variable", "default", "what it does", "when to set it", "source"],
        nccl,
        caption="NCCL environment variables (NCCL 2.30 user guide; defaults checked against the source at v2.30.7 "
        "where they are numbers). NCCL marks the 'debugging' class as not for production",
    )
    r.table(
        "torch",
        ["variable", "default", "what it does", "when to set it", "source"],
        [row[1:] for row in torch_rows],
        caption="PyTorch ProcessGroupNCCL variables (torch_nccl_environment_variables.md, ProcessGroupNCCL.hpp); "
        "defaults move between releases: check your version's",
    )
    logs = [
        [f"`{e['example']}`", e["means"], _cite(e)] for k, e in data.items() if k.startswith("log-") and "example" in e
    ]
    r.table(
        "logs",
        ["NCCL_DEBUG=INFO prints", "what it tells you", "seen in"],
        logs,
        caption="Lines copied from real logs in the cited GitHub issues (host names as posted)",
    )
    fr = data["flight-recorder-format"]
    reading = data["flight-recorder-reading"]
    r.table(
        "flight_recorder",
        ["field", "what a reader does with it"],
        [
            ["`collective_seq_id`", reading["collective_seq_id"]],
            ["`state`", reading["state"]],
            ["`time_discovered_started_ns`, `time_discovered_completed_ns`", reading["time_discovered"]],
            ["`retired`", reading["retired"]],
            ["`duration_ms`", reading["duration_ms"]],
            ["`frames`", "the Python (and C++) stack of the call that enqueued the collective: which line issued it"],
            ["`pg_status`", ", ".join(f"`{k}`" for k in fr["pg_status_keys"]) + ": the last seq id of each kind"],
            ["analyser", reading["analyser"]],
        ],
        caption=f"PyTorch's NCCL flight recorder dump (format version {fr['version']} in FlightRecorder.hpp at "
        f"911ce84b; one pickle per rank): the fields that find the rank that diverged",
    )
    r.add("entry_fields", len(fr["entry_keys"]), "", "fields of one flight-recorder entry")

    # How long a rank waits on a dead InfiniBand peer before NCCL says so.
    timeout = ib_timeout_seconds()
    give_up = ib_give_up_seconds()
    r.add("ib_timeout_exponent", value("nccl_debug.env-NCCL_IB_TIMEOUT.default_value"), "", "NCCL_IB_TIMEOUT default")
    r.add("ib_timeout_s", timeout, "s", "one ACK timeout: 4.096 µs x 2^20")
    r.add("ib_retries", value("nccl_debug.env-NCCL_IB_RETRY_CNT.default_value"), "", "NCCL_IB_RETRY_CNT default")
    r.add("ib_give_up_s", give_up, "s", "timeout x retries: how long before NCCL reports the network error")
    r.claim(
        "IB timeout x retry count = the NCCL doc's 'about 30 s' before a network error",
        give_up,
        value("nccl_debug.env-NCCL_IB_RETRY_CNT.total_s"),
        rel_tol=0.02,
        unit="s",
        formula="4.096 µs x 2^NCCL_IB_TIMEOUT x NCCL_IB_RETRY_CNT",
    )
    old = ib_give_up_seconds(exponent=14)
    r.add("ib_give_up_old_s", old, "s", "the same before NCCL 2.14 (exponent 14)")
    r.claim(
        "each step of NCCL_IB_TIMEOUT doubles the wait: exponent 14 waits 2^6 times less than 20",
        give_up / old,
        2.0**6,
        rel_tol=1e-12,
    )
    torch_timeout = value("nccl_debug.pytorch-nccl-timeout.default_ms") / 1e3
    r.add("torch_timeout_s", torch_timeout, "s", "ProcessGroupNCCL's default collective timeout")
    r.add("torch_over_ib", torch_timeout / give_up, "", "PyTorch's timeout / NCCL's IB give-up time")
    words = value("nccl_debug.pytorch-nccl-timeout.default")  # "10 minutes", as the header's comment says
    in_words = float(words.split()[0]) * {"minutes": 60, "seconds": 1}[words.split()[1]]
    r.claim(
        f"PyTorch's default collective timeout in ms = the entry's '{words}'",
        torch_timeout,
        in_words,
        unit="s",
        formula="kProcessGroupNCCLDefaultTimeout = 10 * 60 * 1000 ms in ProcessGroupNCCL.hpp",
    )
    r.claim(
        "PyTorch's timeout over NCCL's IB give-up time, from the doc's words and the 'about 30 s'",
        r.quantities["torch_over_ib"].value,
        in_words / value("nccl_debug.env-NCCL_IB_RETRY_CNT.total_s"),
        rel_tol=0.02,
        formula="600 s / (4.096 µs x 2^20 x 7)",
    )
    return r


def _editor(e: dict) -> str:
    return " (editor's advice)" if e["when"].startswith("editor:") else ""
