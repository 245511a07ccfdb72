"""`distlab trace FILE...`: everything a slow or failing job left behind, read in one call.

Each file is recognised by its content: a PyTorch profiler trace (Kineto JSON, plain or gzipped; one per rank), an
`NCCL_DEBUG=INFO` log, or nccl-tests output. Traces are diagnosed together (distlab.throughput.trace_diagnose);
logs and sweeps are read by distlab.throughput.trace_nccl. `--record-demo NAME --out DIR` records a real 2-rank run
with one fault injected and reads it back. Pure Python unless --record-demo (the browser runs this command).
"""

from __future__ import annotations

import gzip
import sys

from distlab.core.cli import UsageError, command, emit, parser
from distlab.throughput.trace_diagnose import CAUSE_KEYS, DEMOS, DiagnosisError, diagnose
from distlab.throughput.trace_nccl import read_nccl_log, read_nccl_tests
from distlab.throughput.trace_read import TraceError, read_trace

PROGRESS_BYTES = 32 << 20  # a progress bar on stderr for traces larger than this
SNIFF_BYTES = 1 << 16


def kind_of(path: str) -> str:
    """'trace', 'nccl-log' or 'nccl-tests', from the file's first bytes (gzipped files are traces)."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as exc:
        raise UsageError(f"distlab trace: {path}: {exc.strerror or exc}") from None
    if head[:2] == b"\x1f\x8b":
        with gzip.open(path, "rb") as f:
            try:
                head = f.read(SNIFF_BYTES)
            except (OSError, EOFError) as exc:
                raise UsageError(f"distlab trace: {path}: a broken gzip file ({exc})") from None
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if text.startswith(("{", "[")):
        return "trace"
    if "NCCL INFO" in text or "NCCL WARN" in text or "NCCL version" in text:
        return "nccl-log"
    if "busbw" in text and "algbw" in text:
        return "nccl-tests"
    raise UsageError(f"distlab trace: {path}: neither a profiler trace (JSON), an NCCL_DEBUG log nor nccl-tests output")


def _progress(path: str):
    def show(done: int, total: int) -> None:
        if total >= PROGRESS_BYTES:
            bar = "#" * int(30 * done / total)
            end = "\n" if done >= total else ""
            print(f"\r{path}: [{bar:<30}] {done / 2**20:,.0f}/{total / 2**20:,.0f} MiB", end=end, file=sys.stderr)

    return show


@command("trace", "why is my job slow: per-rank profiler traces, NCCL logs and nccl-tests output, diagnosed")
def trace_command(argv: list[str]) -> int:
    p = parser(
        "trace",
        "Read one PyTorch profiler trace per rank (Kineto/Chrome-trace JSON, plain or .gz), NCCL_DEBUG=INFO logs and\n"
        "nccl-tests output; report time by cause per rank and step, the straggler, the dominant operators and the\n"
        "likely causes, each with the chapter that explains it.",
    )
    p.add_argument("files", nargs="*", help="trace files (one per rank), NCCL logs, nccl-tests output")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeline", action="store_true", help="also give the slowest step's pieces, for drawing")
    p.add_argument("--record-demo", choices=DEMOS, help="record a real 2-rank run with this fault, then read it")
    p.add_argument("--out", help="folder for --record-demo's traces")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="--record-demo on CPU (gloo) or CUDA")
    args = p.parse_args(argv)
    files = list(args.files)
    if args.record_demo:
        if not args.out:
            raise UsageError("distlab trace: --record-demo needs --out DIR (where the traces go)")
        files += _record(args.record_demo, args.out, args.device)
    elif args.out:
        raise UsageError("distlab trace: --out is for --record-demo")
    if not files:
        raise UsageError("distlab trace: give trace files (one per rank), or --record-demo NAME --out DIR")
    kinds = {f: kind_of(f) for f in files}
    report: dict = {}
    traces = [f for f in files if kinds[f] == "trace"]
    try:
        if traces:
            report = diagnose([read_trace(f, _progress(f)) for f in traces], with_timeline=args.timeline)
        report["nccl_logs"] = [read_nccl_log(f) for f in files if kinds[f] == "nccl-log"]
        report["nccl_tests"] = [read_nccl_tests(f) for f in files if kinds[f] == "nccl-tests"]
    except (TraceError, DiagnosisError) as exc:
        raise UsageError(f"distlab trace: {exc}") from None
    emit(report, args.json, render(report))
    return 0


def _record(name: str, out: str, device: str) -> list[str]:
    from distlab.throughput.trace_record import record_demo  # torch: only when asked to record

    try:
        return record_demo(name, out, device=device)
    except ValueError as exc:
        raise UsageError(f"distlab trace: {exc}") from None


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.1f}"


def render(r: dict) -> str:
    """The report as text: per rank, the causes, the straggler, the dominant operators, what the traces lack."""
    lines = []
    if "ranks" in r:
        device = "CUDA (kernels)" if r["device"] == "cuda" else "CPU (no GPU kernels: the training thread's operators)"
        lines.append(f"{len(r['ranks'])} rank(s), {len(r['steps'])} common step(s), {device}")
        head = ["rank", "step ms", *CAUSE_KEYS]
        lines.append("  ".join(f"{h:>12}" for h in head))
        for row in r["ranks"]:
            cells = [str(row["rank"]), _ms(row["step_s"]), *(_ms(row["time_by_cause"][k]) for k in CAUSE_KEYS)]
            lines.append("  ".join(f"{c:>12}" for c in cells))
        lines.append("(ms per step, mean of steps; the causes add up to the step)")
        lines.append(
            f"exposed communication {_ms(r['exposed_communication_s'])} ms per step (mean of ranks); communication "
            f"overlapped with compute: "
            + ", ".join(f"rank {x['rank']} {_ms(x['overlapped_communication_s'])} ms" for x in r["ranks"])
        )
        if r["straggler_rank"] is not None:
            lines.append(
                f"slowest rank: {r['straggler_rank']}, {_ms(r['straggler_excess_s'])} ms per step more of its own work "
                "than the others (median)"
            )
        lines.append(
            f"unrecorded: {100 * r['unattributed_share']:.0f} % of the step had nothing recorded running "
            "(a descheduled process or unprofiled code; left out of the shares below)"
        )
        lines.append("")
        lines.append(f"top cause: {r['top_cause']}")
        lines.append("likely causes, ranked (share of the recorded step):")
        for c in r["causes"]:
            flag = "" if c["measurable"] else "  [not measurable from these traces]"
            lines.append(f"  {c['cause']:<18} {100 * c['share_of_step']:5.1f} %  {c['means']}{flag}")
            lines.append(f"  {'':<18}          fix: {c['what_to_do']}; read: {c['chapter']}")
        lines.append("dominant operators (per step and rank):")
        for op in r["dominant_ops"]:
            lines.append(f"  {_ms(op['seconds_per_step']):>8} ms  {op['calls_per_step']:7.1f} calls  {op['name']}")
        for m in r["missing"]:
            lines.append(f"cannot tell ({m['cause']}): {m['why']}")
    for log in r.get("nccl_logs", []):
        lines.append(f"NCCL log {log['file']}: {log['lines']} NCCL lines, version {log['version'] or 'not printed'}")
        for finding in log["findings"]:
            lines.append(f"  {finding['what']}: {finding['means']}  (e.g. {finding['example']})")
        for w in log["warnings"]:
            lines.append(f"  WARN: {w}")
    for sweep in r.get("nccl_tests", []):
        lines.append(
            f"nccl-tests {sweep['file']}: {sweep['collective'] or 'collective not printed'}, {sweep['ranks']} ranks, "
            f"{len(sweep['rows'])} sizes, peak busbw {sweep['peak_busbw_gbps']:.1f} GB/s at "
            f"{sweep['peak_bytes']:,} B"
        )
        for problem in sweep["problems"]:
            lines.append(f"  check: {problem}")
    return "\n".join(lines)
