// The live memory calculator on calculator.md: per-GPU training memory by category, and a verdict.
//
// The formulas are distlab's (distlab/calculator.py, distlab/models/shapes.py, distlab/memory/layer_activations.py,
// distlab/sharding/zero.py), written once more here with the same floating-point operations in the same order.
// Nothing else is typed here: presets, GPU capacities, the usable fraction, bytes per parameter and defaults come
// from assets/calculator/data.json, which the build writes from distlab. The build also writes
// assets/calculator/vectors.json (inputs and what distlab computes for them), runs this file under Node on every
// vector (gen/assets.py), and tests/site/test_browser.py enters every vector into this page.
(function () {
  "use strict";

  const SHAPE = ["layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "context", "experts", "top_k"];
  const COUNTS = ["experts", "top_k"];  // whole numbers that may be 0 (a dense model)
  const WHOLE = SHAPE.concat(["seq", "micro_batch", "gpus", "tp", "pp"]);
  const CHECKS = ["tie_embeddings", "sequence_parallel", "dropout"];
  const MENUS = ["model", "mlp", "gpu", "recompute", "attention", "precision", "zero"];
  const CATEGORIES = ["weights", "gradients", "optimizer", "activations", "logits"];
  const LABELS = {
    weights: "weights", gradients: "gradients", optimizer: "optimizer: fp32 master, Adam m and v",
    activations: "activations", logits: "logits and loss",
  };
  const ACT = 2, STAT = 4, MASK = 1, INDEX = 8;  // bytes: 16-bit activation, fp32 statistic, bool, int64

  // ------------------------------------------------------------------ formulas (distlab's, in order)
  function ceilDiv(a, b) { return (a - a % b) / b + (a % b ? 1 : 0); }  // ⌈a / b⌉, exact below 2^53
  function floorDiv(a, b) { return (a - a % b) / b; }

  // distlab.models.shapes.ModelShape.params (norm and dropout follow the MLP family)
  function params(m) {
    const h = m.hidden, kvWidth = m.kv_heads * floorDiv(h, m.heads), swiglu = m.mlp === "swiglu";
    const attention = swiglu ? 2 * h * h + 2 * h * kvWidth : 2 * h * h + 2 * h * kvWidth + (h + 2 * kvWidth) + h;
    const norm = swiglu ? h : 2 * h;
    const mlp = (w) => (swiglu ? 3 * h * w : 2 * h * w + w + h);
    const dense = attention + mlp(m.ffn) + 2 * norm;
    const moeLayers = m.experts ? m.layers : 0;
    let blocks = (m.layers - moeLayers) * dense;
    if (m.experts) blocks += moeLayers * (attention + (h * m.experts + m.experts * mlp(m.ffn)) + 2 * norm);
    const embed = m.vocab * h + (swiglu ? 0 : m.context * h);
    const head = m.tie_embeddings ? 0 : m.vocab * h;
    return blocks + embed + head + norm;
  }

  // distlab.memory.layer_activations.moe_slots
  function moeSlots(tokens, experts, topK, cf) {
    if (cf === null) return tokens * topK;
    return experts * Math.ceil(cf * tokens * topK / experts);
  }

  // distlab.memory.layer_activations.saved_tensors, summed in the same order
  function layerBytes(m, s, b, o) {
    const t = o.tp, h = m.hidden, d = floorDiv(h, m.heads), f = floorDiv(m.ffn, t);
    const heads = floorDiv(m.heads, t), kv = Math.max(floorDiv(m.kv_heads, t), 1);
    const rows = o.sequence_parallel ? floorDiv(s * b, t) : s * b;
    if (o.recompute === "full") return ACT * rows * h;
    const qd = heads * d, kvd = kv * d, sb = s * b, stats = m.mlp === "swiglu" ? 1 : 2, dropout = o.dropout;
    let total = 0;
    const norm = () => { total += ACT * rows * h; for (let i = 0; i < stats; i++) total += STAT * rows; };
    norm();
    total += ACT * rows * h;  // the q, k, v projections' input
    if (o.recompute === "selective") {
      total += ACT * sb * qd; total += ACT * sb * kvd; total += ACT * sb * kvd; total += ACT * sb * qd;
    } else if (o.attention === "flash") {
      total += ACT * sb * kvd; total += ACT * sb * qd; total += ACT * sb * kvd;
      total += STAT * b * heads * s; total += ACT * sb * qd;
    } else {
      const scores = b * heads * s * s;
      total += ACT * sb * qd; total += ACT * sb * qd; total += ACT * scores;
      if (dropout) { total += MASK * scores; total += ACT * sb * qd; total += ACT * scores; }
      else total += ACT * sb * qd;
      total += ACT * sb * qd;
    }
    if (dropout) total += MASK * rows * h;
    norm();
    if (m.experts) {
      const k = m.top_k, n = moeSlots(sb, m.experts, k, o.capacity_factor);
      total += ACT * rows * h; total += INDEX * sb * k; total += STAT * sb * k;
      total += INDEX * n; total += INDEX * n; total += ACT * n * h;
      total += ACT * n * f; total += ACT * n * f; total += ACT * n * f; total += ACT * n * f;
      total += ACT * n; total += ACT * n * h;
    } else if (m.mlp === "swiglu") {
      total += ACT * rows * h;
      total += ACT * sb * f; total += ACT * sb * f; total += ACT * sb * f; total += ACT * sb * f;
    } else {
      total += ACT * rows * h; total += ACT * sb * f; total += ACT * sb * f;
    }
    if (dropout) total += MASK * rows * h;
    return total;
  }

  // distlab.memory.layer_activations.output_terms, summed
  function logitsBytes(m, s, b, t, sp) {
    const rows = sp ? floorDiv(s * b, t) : s * b, stats = m.mlp === "swiglu" ? 1 : 2;
    let total = ACT * rows * m.hidden;
    for (let i = 0; i < stats; i++) total += STAT * rows;
    total += ACT * rows * m.hidden; total += STAT * s * b * ceilDiv(m.vocab, t); total += INDEX * s * b;
    return total + STAT;
  }

  // distlab.calculator: ModelShape, BlockShape, saved_tensors and Job validation, then job_memory(job).
  // Throws Error on bad input.
  function jobMemory(data, inp) {
    for (const k of WHOLE) {
      const zeroOk = COUNTS.includes(k);
      if (!Number.isInteger(inp[k]) || inp[k] < 0 || (!zeroOk && inp[k] === 0)) {
        throw new Error(`${k} must be a ${zeroOk ? "whole number" : "positive whole number"}`);
      }
    }
    const m = {};
    for (const k of SHAPE.concat(["mlp", "tie_embeddings"])) m[k] = inp[k];
    if (!m.experts) { m.experts = 0; m.top_k = 0; }
    if (m.mlp !== "swiglu" && m.mlp !== "gelu") throw new Error("mlp must be swiglu or gelu");
    if (m.hidden % m.heads) throw new Error(`hidden ${m.hidden} is not divisible by heads ${m.heads}`);
    if (m.heads % m.kv_heads) throw new Error(`heads ${m.heads} is not divisible by kv_heads ${m.kv_heads}`);
    if (m.experts && !(m.top_k >= 1 && m.top_k <= m.experts)) throw new Error("top_k must be between 1 and experts");
    if (m.experts && m.mlp !== "swiglu") throw new Error("experts are SwiGLU MLPs here (mlp must be swiglu)");
    if (m.mlp === "swiglu" && floorDiv(m.hidden, m.heads) % 2) throw new Error("RoPE needs an even head dimension");
    if (!data.zero.includes(inp.zero)) throw new Error("ZeRO stage must be 0, 1, 2 or 3");
    if (!data.recompute.includes(inp.recompute)) throw new Error(`unknown recompute mode ${inp.recompute}`);
    if (!data.attention.includes(inp.attention)) throw new Error(`unknown attention ${inp.attention}`);
    if (!data.precisions.includes(inp.precision)) throw new Error(`unknown precision ${inp.precision}`);
    if (!(inp.gpu in data.gpus)) throw new Error(`unknown GPU ${inp.gpu}`);
    const cf = inp.capacity_factor ? inp.capacity_factor : null;
    if (cf !== null && !(cf > 0)) throw new Error("capacity factor must be positive");
    const t = inp.tp, p = inp.pp;
    if (inp.gpus % (t * p)) throw new Error(`GPUs (${inp.gpus}) must be a multiple of TP x PP (${t * p})`);
    if (m.heads % t) throw new Error(`attention heads (${m.heads}) must be divisible by TP (${t})`);
    if (m.layers % p) throw new Error(`layers (${m.layers}) must split evenly into PP (${p}) stages`);
    if (m.kv_heads % t && t % m.kv_heads) throw new Error(`kv heads (${m.kv_heads}) and TP (${t}) must divide one another`);
    if (m.ffn % t) throw new Error(`MLP width (${m.ffn}) must be divisible by TP (${t})`);
    if (inp.sequence_parallel && inp.seq % t) throw new Error(`sequence (${inp.seq}) must be divisible by TP (${t})`);

    const d = floorDiv(inp.gpus, t * p);
    const n = params(m);
    const shard = ceilDiv(n, t * p);  // Ψ' on one model-parallel rank
    // distlab.sharding.zero.model_state_bytes_per_gpu(Ψ', d, stage, precision): a sharded state holds ⌈Ψ'/d⌉
    const rank = ceilDiv(shard, d);
    const per = data.bytes_per_param[inp.precision];
    const weights = per.params * (inp.zero >= 3 ? rank : shard);
    const gradients = per.grads * (inp.zero >= 2 ? rank : shard);
    const optimizer = per.optimizer * (inp.zero >= 1 ? rank : shard);
    const opts = { tp: t, sequence_parallel: inp.sequence_parallel, recompute: inp.recompute,
      attention: inp.attention, dropout: inp.dropout, capacity_factor: cf };
    const perLayer = layerBytes(m, inp.seq, inp.micro_batch, opts);
    let logits = logitsBytes(m, inp.seq, inp.micro_batch, t, inp.sequence_parallel);
    const first = perLayer * m.layers, last = perLayer * floorDiv(m.layers, p);
    let stage, activations;
    if (p === 1) { stage = "only"; activations = first; }
    else if (last + logits <= first) { stage = "first"; activations = first; logits = 0; }
    else { stage = "last"; activations = last; }
    const total = weights + gradients + optimizer + activations + logits;
    const capacity = data.gpus[inp.gpu];
    const usable = data.usable_bytes[inp.gpu];
    return { params: n, dp: d, weights, gradients, optimizer, activations, logits, total, capacity, usable,
      reserved: capacity - usable, stage, fits: total <= usable };
  }

  // ------------------------------------------------------------------ the site's number format
  // distlab.core.formatting.format_quantity(value, "B") and format_number: 3 significant digits with a
  // power-of-1000 prefix (GB = 1e9 bytes), integers with thousands separators.
  function withCommas(v) {
    return String(Math.abs(v)).replace(/\B(?=(\d{3})+(?!\d))/g, ",").replace(/^/, v < 0 ? "-" : "");
  }
  function formatNumber(v) {
    if (Number.isInteger(v) && Math.abs(v) < 1e15) return withCommas(v);
    if (v === 0 || !Number.isFinite(v)) return String(v);
    if (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-3) {
      return v.toExponential(3).replace(/e([+-])(\d)$/, "e$10$2");
    }
    return String(Number(v.toPrecision(4)));
  }
  function formatBytes(v) {
    for (const [factor, prefix] of [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "K"]]) {
      if (Math.abs(v) >= factor) return `${formatNumber(Number((v / factor).toPrecision(3)))} ${prefix}B`;
    }
    return `${formatNumber(Number(v.toPrecision(4)))} B`;
  }
  const SHOWN = CATEGORIES.concat(["total", "capacity", "usable", "reserved"]);
  function display(r) {  // the text distlab.calculator.evaluate's "display" holds
    const out = {};
    for (const k of SHOWN) out[k] = formatBytes(r[k]);
    out.params = `${formatNumber(r.params)} params`;
    return out;
  }

  // What the form holds once these inputs are entered: choosing a preset fills in its shape.
  function entered(data, inp) {
    if (inp.model === "custom" || !(inp.model in data.presets)) return inp;
    const preset = data.presets[inp.model], out = Object.assign({}, inp);
    for (const k of SHAPE.concat(["mlp", "tie_embeddings"])) out[k] = preset[k];
    return out;
  }

  if (typeof module !== "undefined" && module.exports) {  // Node: the build checks the formulas (gen/assets.py)
    module.exports = { jobMemory, display, entered };
    return;
  }

  // ------------------------------------------------------------------ the form
  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of children || []) e.append(c);
    return e;
  }
  function field(label, input, hint) {
    const stacked = input.tagName === "SELECT";  // menus get the fieldset's full width, label above
    return el("label", { class: stacked ? "calc-field calc-stacked" : "calc-field" },
      [el("span", { text: label }), input].concat(hint ? [el("small", { text: hint })] : []));
  }
  function number(name, min, step) {
    return el("input", { type: "number", name, min: String(min === undefined ? 1 : min), step: step || "1" });
  }
  function select(name, options) {
    return el("select", { name }, options.map(([v, t]) => el("option", { value: String(v), text: t })));
  }
  function check(name) { return el("input", { type: "checkbox", name }); }

  const PRECISION_TEXT = {
    "mixed": "16 B/param: bf16 weights and gradients",
    "mixed-fp32-grads": "18 B/param: fp32 gradients (Megatron's main_grad)",
    "mixed-fp32-accum": "20 B/param: bf16 + fp32 accumulation",
    "fp32": "16 B/param: fp32 everything",
  };

  function build(root, data) {
    const presets = Object.keys(data.presets);
    const form = el("form", { class: "calc-form", autocomplete: "off" }, [
      el("fieldset", {}, [el("legend", { text: "Model" }),
        field("preset", select("model", presets.map((k) => [k, `${k}: ${data.presets[k].name}`])
          .concat([["custom", "custom shape"]]))),
        field("layers L", number("layers")), field("hidden h", number("hidden")),
        field("heads a", number("heads")), field("KV heads g", number("kv_heads")),
        field("MLP width f", number("ffn"), "each expert's"), field("vocabulary V", number("vocab")),
        field("MLP", select("mlp", [["swiglu", "SwiGLU, RMSNorm, RoPE (Llama)"], ["gelu", "GeLU, LayerNorm (GPT)"]])),
        field("experts E", number("experts", 0), "0: dense"), field("top-k", number("top_k", 0)),
        field("context", number("context"), "learned positions (GPT)"),
        field("tied embeddings", check("tie_embeddings")),
      ]),
      el("fieldset", {}, [el("legend", { text: "Training" }),
        field("sequence s", number("seq"), "tokens"), field("micro-batch b", number("micro_batch"), "per GPU"),
        field("attention", select("attention", [["flash", "FlashAttention"], ["eager", "eager (s × s kept)"]])),
        field("recompute", select("recompute", data.recompute.map((r) => [r, r]))),
        field("dropout", check("dropout")),
        field("precision", select("precision", data.precisions.map((p) => [p, PRECISION_TEXT[p] || p]))),
        field("capacity factor", number("capacity_factor", 0, "any"), "MoE; 0: dropless"),
      ]),
      el("fieldset", {}, [el("legend", { text: "Cluster and parallelism" }),
        field("GPUs N", number("gpus")),
        field("GPU", select("gpu", Object.entries(data.gpus).map(([k, v]) => [k, `${k} (${formatBytes(v)})`]))),
        field("ZeRO stage", select("zero", data.zero.map((z) => [z, ["0: replicate all", "1: shard optimizer",
          "2: + gradients", "3: + weights"][z]]))),
        field("TP t", number("tp")), field("PP p", number("pp")),
        field("sequence parallel", check("sequence_parallel")),
      ]),
    ]);
    const rows = CATEGORIES.map((c) => el("tr", {}, [
      el("td", {}, [el("span", { class: "calc-swatch", "data-cat": c }), LABELS[c]]),
      el("td", { class: "calc-out", "data-key": c })]));
    rows.push(el("tr", { class: "calc-total" }, [el("td", { text: "total per GPU" }),
      el("td", { class: "calc-out", "data-key": "total" })]));
    rows.push(el("tr", {}, [el("td", { text: "usable: GPU memory less the planner's reserve" }),
      el("td", { class: "calc-out", "data-key": "usable" })]));
    rows.push(el("tr", {}, [el("td", { text: "reserve (CUDA context, NCCL buffers, fragmentation)" }),
      el("td", { class: "calc-out", "data-key": "reserved" })]));
    rows.push(el("tr", {}, [el("td", { text: "GPU memory" }), el("td", { class: "calc-out", "data-key": "capacity" })]));
    const out = el("div", { class: "calc-results", "aria-live": "polite" }, [
      el("p", { class: "calc-verdict", "data-key": "verdict" }),
      el("p", { class: "calc-error", "data-key": "error", hidden: "" }),
      el("div", { class: "calc-bar", "aria-hidden": "true" },
        CATEGORIES.map((c) => el("span", { class: "calc-segment", "data-cat": c }))),
      el("table", { class: "calc-table" }, [el("tbody", {}, rows)]),
      el("p", { class: "calc-meta" }, [el("span", { text: "parameters Ψ " }),
        el("strong", { class: "calc-out", "data-key": "params" }), el("span", { text: " · data-parallel replicas d " }),
        el("strong", { class: "calc-out", "data-key": "dp" }), el("span", { text: " · pipeline stage shown: " }),
        el("strong", { "data-key": "stage" })]),
    ]);
    root.replaceChildren(form, out);
    return form;
  }

  function fillPreset(form, preset) {
    for (const k of SHAPE) form.elements[k].value = String(preset[k]);
    form.elements.mlp.value = preset.mlp;
    form.elements.tie_embeddings.checked = !!preset.tie_embeddings;
    form.elements.seq.value = String(preset.seq);  // a preset brings its training sequence...
    form.elements.attention.value = preset.attention;  // ...and how it trains
    form.elements.dropout.checked = !!preset.dropout;
  }

  function read(form) {
    const e = form.elements;
    const inp = {};
    for (const k of MENUS) inp[k] = e[k].value;
    inp.zero = Number(e.zero.value);
    for (const k of CHECKS) inp[k] = e[k].checked;
    for (const k of WHOLE) inp[k] = e[k].value.trim() === "" ? NaN : Number(e[k].value);
    inp.capacity_factor = e.capacity_factor.value.trim() === "" ? 0 : Number(e.capacity_factor.value);
    return inp;
  }

  // The URL holds the inputs (?model=70B&gpus=64&tp=8...), so a reader can share a configuration.
  function toQuery(inp) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(inp)) {
      if (inp.model !== "custom" && SHAPE.concat(["mlp", "tie_embeddings"]).includes(k)) continue;
      q.set(k, typeof v === "boolean" ? (v ? "1" : "0") : String(v));
    }
    return q.toString();
  }
  function fromQuery(form, data, search) {
    const q = new URLSearchParams(search);
    const model = q.get("model");
    if (model && model !== "custom" && model in data.presets) {
      form.elements.model.value = model;
      fillPreset(form, data.presets[model]);
    } else if (model === "custom") form.elements.model.value = "custom";
    for (const [k, v] of q.entries()) {
      const e = form.elements[k];
      if (!e || k === "model") continue;
      if (e.type === "checkbox") e.checked = v === "1" || v === "true"; else e.value = v;
    }
  }

  function show(root, form, data) {
    const q = (k) => root.querySelector(`[data-key="${k}"]`);
    const err = q("error"), verdict = q("verdict");
    let r;
    try {
      r = jobMemory(data, read(form));
    } catch (exc) {
      err.hidden = false;
      err.textContent = `Cannot compute: ${exc.message}.`;
      err.dataset.error = exc.message;
      verdict.textContent = "";
      delete verdict.dataset.fits;
      root.querySelectorAll(".calc-out").forEach((o) => { o.textContent = "—"; delete o.dataset.value; });
      root.querySelectorAll(".calc-segment").forEach((s) => { s.style.width = "0"; });
      q("stage").textContent = "—";
      root.dataset.state = "error";
      return;
    }
    err.hidden = true;
    err.textContent = "";
    delete err.dataset.error;
    const text = display(r);
    for (const k of SHOWN) {
      q(k).textContent = text[k];
      q(k).dataset.value = String(r[k]);
    }
    q("params").textContent = text.params;
    q("params").dataset.value = String(r.params);
    q("dp").textContent = formatNumber(r.dp);
    q("dp").dataset.value = String(r.dp);
    q("stage").textContent = { only: "the only one", first: "the first (p micro-batches in flight)",
      last: "the last (its layers and the logits)" }[r.stage];
    q("stage").dataset.stage = r.stage;
    verdict.dataset.fits = String(r.fits);
    verdict.textContent = r.fits
      ? `Fits: ${text.total} of ${text.usable} usable per GPU (${text.capacity} less the reserve).`
      : `Does not fit: ${text.total} needed, ${text.usable} usable per GPU (${text.capacity} less the reserve).`;
    const scale = Math.max(r.total, r.capacity);
    root.querySelectorAll(".calc-segment").forEach((s) => {
      s.style.width = `${(100 * r[s.dataset.cat] / scale).toFixed(3)}%`;
      s.title = `${LABELS[s.dataset.cat]}: ${formatBytes(r[s.dataset.cat])}`;
    });
    const bar = root.querySelector(".calc-bar");
    bar.style.setProperty("--capacity", `${(100 * r.capacity / scale).toFixed(3)}%`);
    bar.style.setProperty("--usable", `${(100 * r.usable / scale).toFixed(3)}%`);
    root.dataset.state = r.fits ? "fits" : "does-not-fit";
  }

  async function init() {
    const root = document.getElementById("distlab-calculator");
    if (!root || root.dataset.ready) return;
    let data;
    try {
      const resp = await fetch(new URL(root.dataset.src, document.baseURI));
      data = await resp.json();
    } catch (exc) {
      root.textContent = `The calculator could not load its data (${exc.message}).`;
      throw exc;
    }
    const form = build(root, data);
    const d = data.defaults;
    fillPreset(form, data.presets[d.model]);
    for (const [k, v] of Object.entries(d)) {
      const e = form.elements[k];
      if (e.type === "checkbox") e.checked = !!v; else e.value = String(v);
    }
    if (window.location.search) fromQuery(form, data, window.location.search);
    form.addEventListener("input", (ev) => {
      const name = ev.target.name;
      if (name === "model" && ev.target.value !== "custom") fillPreset(form, data.presets[ev.target.value]);
      else if (SHAPE.includes(name) || name === "mlp" || name === "tie_embeddings") form.elements.model.value = "custom";
      show(root, form, data);
      window.history.replaceState(null, "", `${window.location.pathname}?${toQuery(read(form))}`);
    });
    form.addEventListener("submit", (ev) => ev.preventDefault());
    show(root, form, data);
    root.dataset.ready = "true";
  }

  // Material's instant navigation swaps pages without reloading scripts: run on every page it shows.
  if (window.document$) window.document$.subscribe(() => { init(); });
  else document.addEventListener("DOMContentLoaded", init);
})();
