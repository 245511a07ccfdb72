"""published_runs.toml's typed rows against a second printing of the same numbers.

A typo in a published run moves chapter 13's predicted-against-published errors, and the aggregate claims there
(a median, a worst row) rarely see one row move. So each typed field is compared, where one exists, with a second
printing that was not typed by hand:
- Narayanan et al.'s runs: Megatron-LM's examples/sc21/run_table_1.sh, the script that produced their Table 1
  (copied by machine into source_excerpts.toml): TP, PP, micro-batch, batch, layers, hidden, heads, nodes, the DDP
  implementation, virtual stages, recomputation, sequence length; the printed parameter count against the paper's
  P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) to its printed digit;
- LLM Foundry's MPT runs: the benchmark table's own row, kept whole in each row's `detail`, cell by cell, and the MPT
  configs (copied by machine) for the shape, with the printed NumParams = l (12 d^2 + 13 d) + V d + s d + 2 d exactly;
- the Llama rows (torchtitan, NeMo, Megatron-Bridge): the released configs (llama3_models.toml, and Llama 2's
  config.json and GPT-3's Table 2.1 as planner/worked_plan_checks.py types them);
- torchtitan's runs: the benchmark pages' own tables, headings and launch command (copied by machine): TPS/GPU,
  GPUs, parallel degrees, batch sizes, checkpointing, sequence length;
- NeMo 24.07's and Megatron-Bridge 25.11's runs: their performance tables' rows (copied by machine);
- Megatron-Core's README rows (an image): the caption's vocabulary and sequence, GPT's 4h MLP, the printed size
  within 3 % of 12 l h^2 + 2 V h;
- every row's node (GPUs, NICs, their rate) against its hardware source;
- BLOOM: its training notes (copied by machine): the shape, the replica layout, the log line (seconds per
  iteration, samples/s, TFLOPs).
"""

from __future__ import annotations

import re

from distlab.core.facts import entries, quoted

MEGATRON_FFN = 4  # Megatron-LM's GPT default: ffn_hidden_size = 4 x hidden (the script sets no other)
MPT_COLUMNS = (  # LLM Foundry's benchmark tables (scripts/train/benchmarking/README.md), in order
    "model seq gpus gpu mfu hfu tflops micro_batch grad_accum global_batch samples_per_s tokens_per_s "
    "tokens_per_s_per_gpu global_batch_tokens precision mp_mode sharding checkpointing cpu_offload num_params"
).split()
FSDP_STRATEGY = {"FULL_SHARD": "fsdp", "SHARD_GRAD_OP": "zero2", "NO_SHARD": "none"}
DDP_IMPL = {"torch": "overlapped", "local": "after-backward"}  # Megatron-LM 2021: local DDP reduces after backward


def _found(pattern: str, text: str) -> re.Match:
    """The match, or an error naming what the source no longer says."""
    found = re.search(pattern, text)
    if found is None:
        raise ValueError(f"the second printing no longer says {pattern!r}")
    return found


def half_unit(x: float) -> float:
    """Half a unit of the last digit a typed value prints (1.7 -> 0.05, 408 -> 0.5)."""
    text = repr(float(x)).rstrip("0")
    decimals = len(text.split(".")[1]) if "." in text and not text.endswith(".") else 0
    return 0.5 * 10.0**-decimals


def _sc21(text: str) -> dict[str, dict[str, str]]:
    """run_table_1.sh's cases: {model size: {TP: ..., PP: ..., ...}}."""
    cases = {}
    for size, body in re.findall(r'MODEL_SIZE\} == "([^"]+)" \]; then\n(.*?)(?=\nelif|\nelse)', text, flags=re.S):
        cases[size] = dict(re.findall(r"^\s*([A-Z_]+)=(.*)$", body, flags=re.M))
    return cases


def _yamls(text: str) -> dict[str, dict[str, int]]:
    """The MPT configs: {"1b": {"d_model": ..., "n_heads": ..., ...}}."""
    out: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r"mpt-([0-9]+b)\.yaml\n(.*?)(?=\n# |\Z)", text, flags=re.S):
        out[name] = {k: int(v) for k, v in re.findall(r"^\s*([a-z_]+): ([0-9]+)", body, flags=re.M)}
    return out


def _narayanan(key: str, row: dict, script: dict, seq: int) -> list[tuple]:
    size = _found(r"row (\S+)", row["detail"]).group(1)
    case = script[size]
    extra = case["MEGATRON_EXTRA_PARAMS"]
    vpp = re.search(r"--num-layers-per-virtual-pipeline-stage ([0-9]+)", extra)
    layers, pp = int(case["NLS"]), int(case["PP"])
    per_node = quoted("published_runs.narayanan2021-gpt-1p7b-a100-32.gpus_per_node", r"nodes of ([0-9]+) A100")
    l, h, V, s = row["layers"], row["hidden"], row["vocab"], row["seq"]  # noqa: E741 - the paper's symbols
    params = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)) / 1e9
    return [
        (key, "tp", row["tp"], int(case["TP"]), 0),
        (key, "pp", row["pp"], pp, 0),
        (key, "micro_batch", row["micro_batch"], int(case["MBS"]), 0),
        (key, "global_batch", row["global_batch"], int(case["GBS"]), 0),
        (key, "layers", row["layers"], layers, 0),
        (key, "hidden", row["hidden"], int(case["HS"]), 0),
        (key, "heads", row["heads"], int(case["NAH"]), 0),
        (key, "kv_heads", row["kv_heads"], int(case["NAH"]), 0),
        (key, "ffn", row["ffn"], MEGATRON_FFN * int(case["HS"]), 0),
        (key, "gpus", row["gpus"], per_node * int(case["NNODES"]), 0),
        (key, "gpus_per_node", row["gpus_per_node"], per_node, 0),
        (key, "virtual", row["virtual"], layers // pp // int(vpp.group(1)) if vpp else 1, 0),
        (key, "seq", row["seq"], seq, 0),
        (key, "vocab", row["vocab"], quoted(f"published_runs.{key}.vocab", r"vocabulary ([0-9,]+)"), 0),
        (key, "grad_reduce", row["grad_reduce"], DDP_IMPL[case["DDP"]], 0),
        (key, "recompute", row["recompute"], "full" if "--checkpoint-activations" in extra else "none", 0),
        (key, "params_billion", row["params_billion"], params, half_unit(row["params_billion"])),
    ]


def _mpt(key: str, row: dict, configs: dict) -> list[tuple]:
    cells = [x.strip() for x in row["detail"].split("row:", 1)[1].strip().strip("|").split("|")]
    printed = dict(zip(MPT_COLUMNS, cells))
    config = configs[printed["model"]]
    l, d, V, s = row["layers"], row["hidden"], row["vocab"], row["seq"]  # noqa: E741 - the source's symbols
    return [
        (key, "seq", row["seq"], int(printed["seq"]), 0),
        (key, "gpus", row["gpus"], int(printed["gpus"]), 0),
        (key, "mfu", row["mfu"], float(printed["mfu"]) / 100, 1e-9),
        (key, "hfu", row["hfu"], float(printed["hfu"]) / 100, 1e-9),
        (key, "tflops_per_gpu", row["tflops_per_gpu"], float(printed["tflops"]), 0),
        (key, "micro_batch", row["micro_batch"], int(printed["micro_batch"]), 0),
        (key, "global_batch", row["global_batch"], int(printed["global_batch"]), 0),
        (key, "tokens_per_s_per_gpu", row["tokens_per_s_per_gpu"], float(printed["tokens_per_s_per_gpu"]), 0),
        (key, "params_billion", row["params_billion"], int(printed["num_params"]) / 1e9, 1e-9),
        (key, "sharding", row["sharding"], FSDP_STRATEGY[printed["sharding"]], 0),
        (key, "recompute", row["recompute"], "full" if printed["checkpointing"] == "True" else "none", 0),
        (key, "dtype", row["dtype"], "fp8" if "fp8" in printed["precision"] else "bf16", 0),
        (key, "layers", row["layers"], config["n_layers"], 0),
        (key, "hidden", row["hidden"], config["d_model"], 0),
        (key, "heads", row["heads"], config["n_heads"], 0),
        (key, "kv_heads", row["kv_heads"], config["n_heads"], 0),
        (key, "ffn", row["ffn"], config["expansion_ratio"] * config["d_model"], 0),
        (key, "vocab", row["vocab"], config["vocab_size"], 0),
        (
            key,
            "NumParams = l(12d^2 + 13d) + Vd + sd + 2d",
            int(printed["num_params"]),
            l * (12 * d * d + 13 * d) + V * d + s * d + 2 * d,
            0,
        ),
    ]


def _llama_config(model: str) -> dict[str, int] | None:
    """The released config of a Llama or GPT-3 row's model, by its name, as {layers, hidden, heads, kv_heads, ffn,
    vocab} (None for a model without one here)."""
    from distlab.planner.worked_plan_checks import CONFIGS

    name = model.upper().replace("_", "-").replace(" ", "-")
    llama3 = re.fullmatch(r"LLAMA-?3(\.1)?-([0-9]+)B", name)
    if llama3:
        row = entries("llama3_models")[f"Llama-3-{llama3.group(2)}B"]
        return {k: row[k] for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")}
    other = re.fullmatch(r"LLAMA-?2-([0-9]+)B|GPT-?3-(175)B", name)
    if other:
        c = CONFIGS[f"{other.group(1) or other.group(2)}B"]
        head_dim = c["hidden"] // c["heads"]
        return {**{k: c[k] for k in ("layers", "hidden", "heads", "ffn", "vocab")}, "kv_heads": c["kv"] // head_dim}
    return None


def _bloom(key: str, row: dict, notes: str) -> list[tuple]:
    """BLOOM's row against its training notes (the README's variables, replica layout and log line)."""

    def said(pattern: str) -> float:
        return float(_found(pattern, notes).group(1))

    gpus = said(r"GPUs = ([0-9]+)")
    per_gpu = said(r"samples per second: ([0-9.]+)") * said(r"SEQ_LEN=([0-9]+)") / gpus
    return [
        (key, "layers", row["layers"], said(r"NLAYERS=([0-9]+)"), 0),
        (key, "hidden", row["hidden"], said(r"NHIDDEN=([0-9]+)"), 0),
        (key, "heads", row["heads"], said(r"NHEADS=([0-9]+)"), 0),
        (key, "kv_heads", row["kv_heads"], said(r"NHEADS=([0-9]+)"), 0),
        (key, "ffn", row["ffn"], MEGATRON_FFN * said(r"NHIDDEN=([0-9]+)"), 0),
        (key, "seq", row["seq"], said(r"SEQ_LEN=([0-9]+)"), 0),
        (key, "global_batch", row["global_batch"], said(r"GLOBAL_BATCH_SIZE=([0-9]+)"), 0),
        (key, "step_seconds", row["step_seconds"], said(r"per iteration \(s\)\s*: ([0-9.]+)"), 0),
        (key, "tflops_per_gpu", row["tflops_per_gpu"], said(r"TFLOPs: ([0-9.]+)"), 0),
        (key, "tokens_per_s_per_gpu", row["tokens_per_s_per_gpu"], per_gpu, half_unit(row["tokens_per_s_per_gpu"])),
        (key, "tp", row["tp"], said(r"TP=([0-9]+)"), 0),
        (key, "pp", row["pp"], said(r"PP=([0-9]+)"), 0),
        (key, "dp", row["dp"], said(r"DP=([0-9]+)"), 0),
        (key, "micro_batch", row["micro_batch"], said(r"MBS=([0-9]+)"), 0),
        (key, "gpus", row["gpus"], gpus, 0),
    ]


def _md_rows(block: str) -> list[dict[str, str]]:
    """The rows of the markdown table(s) in `block`, each as {column: cell} (the |---| rule skipped)."""
    out, header = [], None
    for line in block.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            out.append(dict(zip(header, cells)))
    return out


def _torchtitan_tables(text: str) -> dict[str, tuple[str, dict[str, dict[str, str]]]]:
    """torchtitan's benchmark tables: {table number: (its heading, {row label: {column: cell}})}."""
    tables = {}
    for number, heading, body in re.findall(
        r"\*\*Table ([0-9]+)\*\* ([^\n]*)\n(.*?)(?=\*\*Table|\Z)", text, flags=re.S
    ):
        tables[number] = (heading, {next(iter(x.values())): x for x in _md_rows(body)})
    return tables


def _nvidia(key: str, row: dict, table: list[dict[str, str]], heading: str) -> list[tuple]:
    """A NeMo or Megatron-Bridge row against its performance table's row (the model's, at the row's GPU count)."""
    model = _found(r"row (\S+)", row["detail"]).group(1)
    found = [x for x in table if x["Model"] == model and int(x["#-GPUs"]) == row["gpus"]]
    if len(found) != 1:
        return [(key, "gpus", row["gpus"], f"{len(found)} rows of {model} at that GPU count", 0)]
    printed = found[0]

    def number(column: str) -> float:
        cell = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", printed[column])  # a linked figure: its text
        return 1 if cell == "n/a" else float(cell)

    precision = printed.get("Precision", heading)
    out = [
        (key, "global_batch", row["global_batch"], number("GBS"), 0),
        (key, "micro_batch", row["micro_batch"], number("MBS"), 0),
        (key, "seq", row["seq"], number("Sequence Length"), 0),
        (key, "tp", row["tp"], number("TP"), 0),
        (key, "pp", row["pp"], number("PP"), 0),
        (key, "cp", row["cp"], number("CP"), 0),
        (key, "virtual", row["virtual"], number("VP"), 0),
        (key, "tokens_per_s_per_gpu", row["tokens_per_s_per_gpu"], number("Tokens / sec / GPU"), 0),
        (key, "tflops_per_gpu", row["tflops_per_gpu"], number("Model TFLOP / sec / GPU"), 0),
        (key, "dtype", row["dtype"], "fp8" if "FP8" in precision else "bf16", 0),
    ]
    if "FSDP" in printed:
        out.append(
            (key, "sharding", row.get("sharding", "not printed"), "fsdp" if number("FSDP") else "not printed", 0)
        )
    return out


def _node(key: str, row: dict, excerpts: dict) -> list[tuple]:
    """A row's node (GPUs, NICs, NIC rate) against what its hardware source prints: the DGX H100 entry
    (interconnect.toml, itself claimed against NVIDIA's user guide), the Megatron paper's Section 5, torchtitan's
    hardware list, BLOOM's notes."""
    from distlab.core.facts import value

    fields = ("gpus_per_node", "nics_per_node", "nic_gbits_per_s")
    if row.get("sources", {}).get("gpus_per_node") == "dgx-h100-guide":
        dgx = ("gpus_per_node", "compute_nics", "gbits_per_s_per_direction")
        printed = [value(f"interconnect.DGX-H100.{f}") for f in dgx]
    elif row["source"] == "narayanan2021":
        path = f"published_runs.{key}.gpus_per_node"
        eight = quoted(path, r"(eight) [0-9]+ Gb/s HDR")
        printed = [quoted(path, r"nodes of ([0-9]+) A100"), eight, quoted(path, r"eight ([0-9]+) Gb/s HDR")]
    elif row["source"] in ("torchtitan-2412", "torchtitan-asynctp-2506", "torchtitan-h200-2506"):
        text = excerpts[{"torchtitan-2412": "torchtitan-2412-tables"}.get(row["source"], row["source"])]["text"]
        gpus = float(_found(r"([0-9]+) NVIDIA H[12]00 GPUs", text).group(1))
        printed = [gpus, gpus, float(_found(r"([0-9]+) ?Gb/s[^\n]* per GPU", text).group(1))]  # a NIC per GPU
    elif key.startswith("bloom-"):
        text = excerpts["bigscience-tr11-readme"]["text"]
        printed = [
            float(_found(r"([0-9]+) GPUs per node", text).group(1)),
            float(_found(r"([0-9]+) OmniPath", text).group(1)),
        ]
    else:
        return []
    return [(key, f, row[f], v, 0) for f, v in zip(fields, printed) if f in row]


def _config_seq(excerpts: dict, commit: str, model: str) -> int:
    """seq_len of the Llama 3 training config (8b, 70b, 405b from the row's model) at `commit`, as copied."""
    size = _found(r"([0-9]+)B$", model).group(1)
    blocks = excerpts["torchtitan-train-configs"]["text"].split("# [")
    block = next(b for b in blocks if b.startswith(f"{commit}:") and f"llama3_{size}b.toml" in b.split("]")[0])
    return int(_found(r"seq_len = ([0-9]+)", block).group(1))


def _torchtitan(key: str, row: dict, tables: dict, excerpts: dict) -> list[tuple]:
    """A torchtitan row against its table's cell and heading (GPUs, batch sizes, parallel degrees, checkpointing)."""
    heading, cells = tables[_found(r"Table ([0-9]+)", row["detail"]).group(1)]
    printed = cells[_found(r"row '([^']+)'", row["detail"]).group(1)]

    def degree(name: str, default: int = 1) -> int:
        found = re.search(rf"\b{name} ?([0-9]+)\b", printed[next(iter(printed))] + " | " + heading)
        return int(found.group(1)) if found else default

    gpus = int(_found(r"([0-9]+) GPUs", heading).group(1))
    tp, pp, cp = degree("TP"), degree("PP"), degree("CP")
    dp = degree("FSDP", gpus // (tp * pp * cp))
    local = int(_found(r"Local batch size ([0-9]+)", heading).group(1))
    batch = re.search(r"global batch size ([0-9]+)", heading)
    out = [
        (key, "tokens_per_s_per_gpu", row["tokens_per_s_per_gpu"], float(printed["TPS/GPU"].replace(",", "")), 0),
        (key, "gpus", row["gpus"], gpus, 0),
        (key, "tp", row["tp"], tp, 0),
        (key, "pp", row["pp"], pp, 0),
        (key, "cp", row["cp"], cp, 0),
        (key, "dp", row["dp"], dp, 0),
        (key, "global_batch", row["global_batch"], int(batch.group(1)) if batch else local * dp, 0),
        (key, "recompute", row["recompute"], "selective" if "Selective activation" in heading else "full", 0),
    ]
    # the sequence: the table's column where it prints one, else the training config's seq_len at the benchmark's
    # torchtitan commit (9dec370, the page's stated version)
    seq = (
        int(printed["Sequence Length"])
        if "Sequence Length" in printed
        else _config_seq(excerpts, "9dec370", row["model"])
    )
    out.append((key, "seq", row["seq"], seq, 0))
    schedule = _found(r"row '([^']+)'", row["detail"]).group(1) if pp > 1 else ""
    if "virtual" in row and "1F1B" in schedule + heading and "Interleaved" not in schedule:
        out.append((key, "virtual", row["virtual"], 1, 0))  # plain 1F1B: one model chunk per rank
    if "micro_batch" in row and pp == 1:  # no pipeline: a rank's local batch is its one micro-batch
        out.append((key, "micro_batch", row["micro_batch"], local, 0))
    return out


def _torchtitan_2025(key: str, row: dict, excerpts: dict) -> list[tuple]:
    """torchtitan's June 2025 rows: the async-TP tables (by model, row and column) and Trainy's H200 runs (by node
    count), with the layout their headings and launch command print."""
    if row["source"] == "torchtitan-asynctp-2506":
        text = excerpts["torchtitan-asynctp-2506"]["text"]
        size = _found(r"([0-9]+)B$", row["model"]).group(1)
        heading = _found(rf"#### (Llama3 {size}b [^\n]*)", text).group(1)
        table = _md_rows(text.split(heading, 1)[1].split("####", 1)[0])
        label, column = (
            _found(r"row '([^']+)'", row["detail"]).group(1),
            _found(r"column '([^']+)'", row["detail"]).group(1),
        )
        tokens = float(next(x for x in table if x["Quantization"] == label)[column])
        gpus, dp = int(_found(r"on ([0-9]+) H100s", heading).group(1)), int(_found(r"FSDP=([0-9]+)", heading).group(1))
        tp = int(_found(r"TP=([0-9]+)", heading).group(1))
        local = int(_found(r"local batch size ([0-9]+)", heading).group(1))
        recompute = "full" if "full AC" in heading else "selective"
    else:
        text = excerpts["torchtitan-h200-2506"]["text"]
        nodes = _found(r"NUM_NODES = ([0-9]+)", row["detail"]).group(1)
        tokens = float(next(x for x in _md_rows(text) if x.get("NUM_NODES") == nodes)["TPS/GPU"])
        gpus = int(nodes) * int(_found(r"--nproc_per_node ([0-9]+)", text).group(1))
        tp, dp = 1, gpus  # FSDP over every GPU (llama3_8b.toml's defaults)
        local, recompute = int(_found(r"--training.local_batch_size=([0-9]+)", text).group(1)), row["recompute"]
    # the sequence: llama3's training config at the torchtitan commit each page names
    commit = "820504e" if row["source"] == "torchtitan-asynctp-2506" else "e7c0cae"
    seq = [(key, "seq", row["seq"], _config_seq(excerpts, commit, row["model"]), 0)]
    return seq + [
        (key, "tokens_per_s_per_gpu", row["tokens_per_s_per_gpu"], tokens, 0),
        (key, "gpus", row["gpus"], gpus, 0),
        (key, "tp", row["tp"], tp, 0),
        (key, "dp", row["dp"], dp, 0),
        (key, "micro_batch", row["micro_batch"], local, 0),
        (key, "global_batch", row["global_batch"], local * dp, 0),
        (key, "recompute", row["recompute"], recompute, 0),
    ]


def _megatron_core(key: str, row: dict) -> list[tuple]:
    """Megatron-Core's README rows (their table is an image): GPT's 4h MLP and full heads, the vocabulary and sequence
    its caption states, and the printed size, a rounded label within 3 % of 12 l h^2 + 2 V h in every row (the
    untied embeddings; the README rounds 31.5 to 32 and 1.74 to 1.7): x2, /2 of a shape field moves it past that."""
    path = f"published_runs.{key}.vocab"
    l, h, V = row["layers"], row["hidden"], row["vocab"]  # noqa: E741 - the paper's symbols
    return [
        (key, "ffn", row["ffn"], MEGATRON_FFN * row["hidden"], 0),
        (key, "kv_heads", row["kv_heads"], row["heads"], 0),
        (key, "vocab", row["vocab"], quoted(path, r"vocabulary ([0-9,]+)"), 0),
        (key, "seq", row["seq"], quoted(path, r"sequence ([0-9]+)"), 0),
        (
            key,
            "params_billion",
            row["params_billion"],
            (12 * l * h * h + 2 * V * h) / 1e9,
            0.03 * row["params_billion"],
        ),
    ]


def second_printings() -> list[tuple]:
    """(row, field, typed, printed elsewhere, tolerance) for every field with a second printing."""
    excerpts = entries("source_excerpts")
    script = _sc21(excerpts["megatron-sc21-table-1"]["text"])
    seq = int(_found(r"--seq-length ([0-9]+)", excerpts["megatron-sc21-table-1"]["text"]).group(1))
    configs = _yamls(excerpts["llm-foundry-mpt-yamls"]["text"])
    tables = _torchtitan_tables(excerpts["torchtitan-2412-tables"]["text"])
    nemo = excerpts["nemo-2407-pretraining"]["text"]
    bridge = excerpts["megatron-bridge-2511-h100"]["text"]
    out: list[tuple] = []
    for key, row in entries("published_runs").items():
        if row.get("source") == "narayanan2021":
            out += _narayanan(key, row, script, seq)
        elif row.get("source") == "llm-foundry-benchmarks":
            out += _mpt(key, row, configs)
        elif row.get("source") == "torchtitan-2412":
            out += _torchtitan(key, row, tables, excerpts)
        elif row.get("source") in ("torchtitan-asynctp-2506", "torchtitan-h200-2506"):
            out += _torchtitan_2025(key, row, excerpts)
        elif row.get("source") == "megatron-core-readme":
            out += _megatron_core(key, row)
        elif row.get("source") == "nemo-perf-2407":
            out += _nvidia(key, row, _md_rows(nemo), _found(r"at (\S+) precision", nemo).group(1))
        elif row.get("source") == "megatron-bridge-perf":
            out += _nvidia(key, row, _md_rows(bridge), "")
        elif key.startswith("bloom-"):
            out += _bloom(key, row, excerpts["bigscience-tr11-readme"]["text"])
        out += _node(key, row, excerpts)
        config = _llama_config(row.get("model", ""))
        if config is not None:
            out += [(key, f, row[f], v, 0) for f, v in config.items() if f in row]
    return out


def mismatches() -> tuple[list[str], int]:
    """(each disagreeing field, named with both values; how many fields were compared)."""
    pairs = second_printings()
    wrong = []
    for key, field, typed, printed, tol in pairs:
        if isinstance(typed, str) or isinstance(printed, str):
            same = typed == printed
        else:
            same = abs(typed - printed) <= tol + 1e-12 * abs(printed)
        if not same:
            wrong.append(f"{key}.{field} = {typed}, printed {printed}")
    return wrong, len(pairs)


def corpus_claim(r) -> None:
    """Claim every typed field of the published runs that has a second printing against it."""
    wrong, compared = mismatches()
    r.claim(
        f"published runs: every typed field with a second printing agrees with it ({compared} compared: the SC21 "
        "script, the MPT table's own rows and configs, torchtitan's, NeMo's and Megatron-Bridge's tables, the Llama "
        "and GPT-3 configs, the nodes' hardware, BLOOM's training notes; fields that differ: "
        + ("; ".join(wrong) or "none")
        + ")",
        len(wrong),
        0,
        formula="to the printed digit; NumParams = l(12d^2 + 13d) + Vd + sd + 2d and P = 12lh^2(1 + 13/12h + "
        "(V + s)/12lh) where a count is printed",
    )
