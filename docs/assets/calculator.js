// The live memory calculator on calculator.md: per-GPU training memory by category, and a verdict.
//
// The formulas are distlab/calculator.py's, written once more here with the same floating-point
// operations in the same order. Nothing else is typed here: presets, GPU capacities, bytes per parameter
// and defaults come from assets/calculator/data.json, which the build writes from distlab. The build
// also writes assets/calculator/vectors.json (inputs and what distlab computes for them), and
// tests/test_browser.py enters every vector into this page and compares what the page shows.
(function () {
  "use strict";

  const SHAPE = ["layers", "hidden", "heads", "kv_heads", "ffn", "vocab"];
  const WHOLE = SHAPE.concat(["seq", "micro_batch", "gpus", "tp", "pp"]);
  const CATEGORIES = ["weights", "gradients", "optimizer", "activations"];
  const LABELS = {
    weights: "weights (bf16)", gradients: "gradients (bf16)",
    optimizer: "optimizer: fp32 master, Adam m and v", activations: "activations",
  };

  // ------------------------------------------------------------------ formulas (distlab's, in order)
  // distlab.models.shapes.ModelShape.params
  function params(m) {
    const h = m.hidden, f = m.ffn;
    const kvWidth = m.kv_heads * Math.floor(h / m.heads);
    let perLayer;
    if (m.mlp === "swiglu") perLayer = 2 * h * h + 2 * h * kvWidth + 3 * h * f + 2 * h;
    else perLayer = 2 * h * h + 2 * h * kvWidth + (h + 2 * kvWidth) + h + 2 * h * f + f + h + 4 * h;
    const embed = m.vocab * h + (m.mlp === "gelu" ? m.seq * h : 0);
    const head = m.tie_embeddings ? 0 : m.vocab * h;
    const finalNorm = m.mlp === "swiglu" ? h : 2 * h;
    return m.layers * perLayer + embed + head + finalNorm;
  }

  // distlab.memory.activations.activation_bytes_per_layer (Korthikanti et al. 2022, Table 2)
  function activationBytesPerLayer(seq, batch, hidden, heads, t, sequenceParallel, recompute) {
    const sbh = seq * batch * hidden;
    const attentionCore = 5 * heads * seq / (hidden * t);
    if (recompute === "full") return 2 * sbh / (sequenceParallel ? t : 1);
    if (sequenceParallel) return sbh / t * 34 + (recompute === "none" ? sbh * attentionCore : 0);
    return sbh * (10 + 24 / t) + (recompute === "none" ? sbh * attentionCore : 0);
  }

  // ⌈a / b⌉ in exact integer arithmetic (a, b below 2^53)
  function ceilDiv(a, b) { return (a - a % b) / b + (a % b ? 1 : 0); }

  // distlab.calculator: ModelShape and Plan validation, then memory(plan). Throws Error on bad input.
  function memory(data, inp) {
    for (const k of WHOLE) {
      if (!Number.isInteger(inp[k]) || inp[k] <= 0) throw new Error(`${k} must be a positive whole number`);
    }
    const m = {};
    for (const k of SHAPE.concat(["mlp", "tie_embeddings"])) m[k] = inp[k];
    m.seq = inp.seq;
    if (m.mlp !== "swiglu" && m.mlp !== "gelu") throw new Error(`mlp must be swiglu or gelu`);
    if (m.hidden % m.heads) throw new Error(`hidden ${m.hidden} is not divisible by heads ${m.heads}`);
    if (m.heads % m.kv_heads) throw new Error(`heads ${m.heads} is not divisible by kv heads ${m.kv_heads}`);
    if (!data.zero.includes(inp.zero)) throw new Error(`ZeRO stage must be 0, 1, 2 or 3`);
    if (!data.recompute.includes(inp.recompute)) throw new Error(`unknown recompute mode ${inp.recompute}`);
    if (!(inp.gpu in data.gpus)) throw new Error(`unknown GPU ${inp.gpu}`);
    const t = inp.tp, p = inp.pp;
    if (inp.gpus % (t * p)) throw new Error(`GPUs (${inp.gpus}) must be a multiple of TP x PP (${t * p})`);
    if (m.heads % t) throw new Error(`attention heads (${m.heads}) must be divisible by TP (${t})`);
    if (m.layers % p) throw new Error(`layers (${m.layers}) must split evenly into PP (${p}) stages`);

    const d = Math.floor(inp.gpus / (t * p));
    const n = params(m);
    const shard = ceilDiv(n, t * p);  // Ψ' on one model-parallel rank
    // distlab.sharding.zero.model_state_bytes_per_gpu(Ψ', d, stage): a sharded state holds ⌈Ψ'/d⌉ elements
    const rank = ceilDiv(shard, d);
    const per = data.bytes_per_param;
    const weights = per.params * (inp.zero >= 3 ? rank : shard);
    const gradients = per.grads * (inp.zero >= 2 ? rank : shard);
    const optimizer = per.optimizer * (inp.zero >= 1 ? rank : shard);
    const perLayer = activationBytesPerLayer(inp.seq, inp.micro_batch, m.hidden, m.heads, t,
      inp.sequence_parallel, inp.recompute);
    const activations = m.layers * perLayer;
    const total = weights + gradients + optimizer + activations;
    const capacity = data.gpus[inp.gpu];
    return { params: n, dp: d, weights, gradients, optimizer, activations, total, capacity,
      fits: total <= capacity };
  }

  // ------------------------------------------------------------------ the site's number format
  // distlab.core.results.format_quantity(value, "B") and format_number: 3 significant digits with a
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
  function number(name, min) { return el("input", { type: "number", name, min: String(min || 1), step: "1" }); }
  function select(name, options) {
    return el("select", { name }, options.map(([v, t]) => el("option", { value: String(v), text: t })));
  }

  function build(root, data) {
    const presets = Object.keys(data.presets);
    const form = el("form", { class: "calc-form", autocomplete: "off" }, [
      el("fieldset", {}, [el("legend", { text: "Model" }),
        field("preset", select("model", presets.map((k) => [k, `${k}: ${data.presets[k].name}`])
          .concat([["custom", "custom shape"]]))),
        field("layers L", number("layers")), field("hidden h", number("hidden")),
        field("heads a", number("heads")), field("KV heads", number("kv_heads")),
        field("MLP width", number("ffn")), field("vocabulary", number("vocab")),
        field("MLP", select("mlp", [["swiglu", "SwiGLU (Llama)"], ["gelu", "GELU (GPT)"]])),
        field("tied embeddings", el("input", { type: "checkbox", name: "tie_embeddings" })),
      ]),
      el("fieldset", {}, [el("legend", { text: "Batch" }),
        field("sequence s", number("seq"), "tokens"), field("micro-batch b", number("micro_batch"), "per GPU"),
        field("recompute", select("recompute", data.recompute.map((r) => [r, r]))),
      ]),
      el("fieldset", {}, [el("legend", { text: "Cluster and parallelism" }),
        field("GPUs N", number("gpus")),
        field("GPU", select("gpu", Object.entries(data.gpus).map(([k, v]) => [k, `${k} (${formatBytes(v)})`]))),
        field("ZeRO stage", select("zero", data.zero.map((z) => [z, ["0: replicate all", "1: shard optimizer",
          "2: + gradients", "3: + weights"][z]]))),
        field("TP t", number("tp")), field("PP p", number("pp")),
        field("sequence parallel", el("input", { type: "checkbox", name: "sequence_parallel" })),
      ]),
    ]);
    const rows = CATEGORIES.map((c) => el("tr", {}, [
      el("td", {}, [el("span", { class: "calc-swatch", "data-cat": c }), LABELS[c]]),
      el("td", { class: "calc-out", "data-key": c })]));
    rows.push(el("tr", { class: "calc-total" }, [el("td", { text: "total per GPU" }),
      el("td", { class: "calc-out", "data-key": "total" })]));
    rows.push(el("tr", {}, [el("td", { text: "GPU memory" }), el("td", { class: "calc-out", "data-key": "capacity" })]));
    const out = el("div", { class: "calc-results", "aria-live": "polite" }, [
      el("p", { class: "calc-verdict", "data-key": "verdict" }),
      el("p", { class: "calc-error", "data-key": "error", hidden: "" }),
      el("div", { class: "calc-bar", "aria-hidden": "true" },
        CATEGORIES.map((c) => el("span", { class: "calc-segment", "data-cat": c }))),
      el("table", { class: "calc-table" }, [el("tbody", {}, rows)]),
      el("p", { class: "calc-meta" }, [el("span", { text: "parameters Ψ " }),
        el("strong", { class: "calc-out", "data-key": "params" }), el("span", { text: " · data-parallel replicas d " }),
        el("strong", { class: "calc-out", "data-key": "dp" })]),
    ]);
    root.replaceChildren(form, out);
    return form;
  }

  function fillShape(form, preset) {
    for (const k of SHAPE) form.elements[k].value = String(preset[k]);
    form.elements.mlp.value = preset.mlp;
    form.elements.tie_embeddings.checked = !!preset.tie_embeddings;
  }

  function read(form) {
    const e = form.elements;
    const inp = { model: e.model.value, mlp: e.mlp.value, gpu: e.gpu.value, recompute: e.recompute.value,
      zero: Number(e.zero.value), tie_embeddings: e.tie_embeddings.checked,
      sequence_parallel: e.sequence_parallel.checked };
    for (const k of WHOLE) inp[k] = e[k].value.trim() === "" ? NaN : Number(e[k].value);
    return inp;
  }

  function show(root, form, data) {
    const q = (k) => root.querySelector(`[data-key="${k}"]`);
    const err = q("error"), verdict = q("verdict");
    let r;
    try {
      r = memory(data, read(form));
    } catch (exc) {
      err.hidden = false;
      err.textContent = `Cannot compute: ${exc.message}.`;
      err.dataset.error = exc.message;
      verdict.textContent = "";
      delete verdict.dataset.fits;
      root.querySelectorAll(".calc-out").forEach((o) => { o.textContent = "—"; delete o.dataset.value; });
      root.querySelectorAll(".calc-segment").forEach((s) => { s.style.width = "0"; });
      root.dataset.state = "error";
      return;
    }
    err.hidden = true;
    err.textContent = "";
    delete err.dataset.error;
    for (const k of CATEGORIES.concat(["total", "capacity"])) {
      q(k).textContent = formatBytes(r[k]);
      q(k).dataset.value = String(r[k]);
    }
    q("params").textContent = `${formatNumber(r.params)} params`;
    q("params").dataset.value = String(r.params);
    q("dp").textContent = formatNumber(r.dp);
    q("dp").dataset.value = String(r.dp);
    verdict.dataset.fits = String(r.fits);
    verdict.textContent = r.fits
      ? `Fits: ${formatBytes(r.total)} of ${formatBytes(r.capacity)} per GPU.`
      : `Does not fit: ${formatBytes(r.total)} needed, ${formatBytes(r.capacity)} per GPU.`;
    const scale = Math.max(r.total, r.capacity);
    root.querySelectorAll(".calc-segment").forEach((s) => {
      s.style.width = `${(100 * r[s.dataset.cat] / scale).toFixed(3)}%`;
      s.title = `${LABELS[s.dataset.cat]}: ${formatBytes(r[s.dataset.cat])}`;
    });
    root.querySelector(".calc-bar").style.setProperty("--capacity", `${(100 * r.capacity / scale).toFixed(3)}%`);
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
    fillShape(form, data.presets[d.model]);
    for (const [k, v] of Object.entries(d)) {
      const e = form.elements[k];
      if (e.type === "checkbox") e.checked = !!v; else e.value = String(v);
    }
    form.addEventListener("input", (ev) => {
      const name = ev.target.name;
      if (name === "model" && ev.target.value !== "custom") fillShape(form, data.presets[ev.target.value]);
      else if (SHAPE.includes(name) || name === "mlp" || name === "tie_embeddings") form.elements.model.value = "custom";
      show(root, form, data);
    });
    form.addEventListener("submit", (ev) => ev.preventDefault());
    show(root, form, data);
    root.dataset.ready = "true";
  }

  // Material's instant navigation swaps pages without reloading scripts: run on every page it shows.
  if (window.document$) window.document$.subscribe(() => { init(); });
  else document.addEventListener("DOMContentLoaded", init);
})();
