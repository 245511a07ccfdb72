// The Plan page (docs/plan.md): distlab's planner, run in the reader's browser.
//
// Nothing here computes a plan. The page turns its form into the arguments of `distlab plan ... --json`, and a
// Web Worker (this same file, started as a worker) runs distlab.core.cli.main on them inside Pyodide: CPython
// compiled to WebAssembly, served by this site with the bundle of distlab modules the planner imports
// (gen/plan_page.py builds it; gen/plan_entry.py is its way in). The page only draws what the command prints,
// so its answers are the command line's by construction, and tests/site/test_plan_page.py checks them against
// the build's own `distlab plan --json` on several requests.
//
// Loaded by docs/plan.md only (Pyodide is never fetched on another page). The worker outlives Material's instant
// navigation, so coming back to the page finds Python warm. The form is read from the command's own argparse
// parser (assets/plan/form.json); the inputs live in the address (?model=70B&nodes=8&tp=4), and the copy button
// gives the equivalent `distlab plan` line.
(function () {
  "use strict";

  // ============================================================== in the worker: Pyodide and distlab
  if (typeof window === "undefined") {
    const ROOT = "/home/pyodide/distlab-site";
    let python = null; // Pyodide starting: begun as soon as the page runs this script
    let ready = null; // distlab unpacked and importable: once the page has said which bundle

    async function start(assets) {
      const { loadPyodide } = await import(assets + "pyodide/pyodide.mjs");
      return loadPyodide({
        indexURL: assets + "pyodide/",
        stdLibURL: assets + "pyodide/python_stdlib.pyc.zip", // the standard library as bytecode (make setup)
      });
    }

    async function install(assets, bundle, begun) {
      const zip = await fetch(assets + bundle).then((r) => {
        if (!r.ok) throw new Error(`${r.status} fetching ${bundle}`);
        return r.arrayBuffer();
      });
      const py = await python;
      py.unpackArchive(zip, "zip", { extractDir: ROOT });
      py.runPython(`import sys\nsys.path.insert(0, ${JSON.stringify(ROOT)})\nimport plan_entry\n` +
                   `plan_entry.prepare(${JSON.stringify(ROOT)})`);
      return { run: py.pyimport("plan_entry").run, seconds: (performance.now() - begun) / 1000 };
    }

    const begun = performance.now();
    self.onmessage = async (event) => {
      const msg = event.data;
      if (msg.type === "start") {
        python = python || start(msg.assets);
        return;
      }
      if (msg.type === "bundle") {
        ready = ready || install(msg.assets, msg.bundle, begun);
        try {
          self.postMessage({ type: "ready", seconds: (await ready).seconds });
        } catch (err) {
          self.postMessage({ type: "ready", error: String(err && err.message || err) });
        }
        return;
      }
      try {
        const b = await ready;
        const out = JSON.parse(b.run(JSON.stringify(msg.argv), JSON.stringify(msg.files || {})));
        self.postMessage({ type: "result", id: msg.id, ...out });
      } catch (err) {
        self.postMessage({ type: "result", id: msg.id, rc: -1, stdout: "", stderr: String(err && err.message || err) });
      }
    };
    return;
  }

  // ============================================================== on the page
  const SCRIPT = document.currentScript && document.currentScript.src;
  const CUSTOM = "custom";
  // Fieldsets of the form, by argparse destination; an option the command gains later lands in "More options".
  const SECTIONS = [
    ["Model", ["model"]],
    ["Cluster", ["gpu", "nodes", "gpus_per_node", "nics_per_node", "intra_bw", "inter_bw"]],
    ["Training", ["seq", "global_batch_tokens", "task", "precision", "matmul_dtype", "optimizer", "attention"]],
  ];
  // The step's causes that happen inside each micro-batch's forward and backward on a stage (the pipeline
  // simulator's op times include them); the others come after the last backward.
  const IN_STAGE = new Set(["compute", "recompute", "exposed_tp", "exposed_cp_ep", "pipeline_bubble"]);
  const TIMELINE_MAX_OPS = 200000;
  // Names for the keys of step_breakdown and the order to show them and memory_by_category in (the JSON's keys
  // are sorted); a key the planner adds later is shown too, under its own name, after these.
  const TIME_NAMES = {
    compute: "compute", recompute: "recomputation", exposed_tp: "tensor-parallel (exposed)",
    exposed_cp_ep: "context/expert-parallel (exposed)", pipeline_bubble: "pipeline bubble",
    stragglers: "stragglers (slowest of N ranks)",
    exposed_dp: "data-parallel (exposed)", offload: "offload (exposed)", optimizer: "optimizer step",
  };
  const MEMORY_ORDER = ["weights", "gradients", "optimizer", "activations", "logits", "gather buffers",
                        "communication buffers"];
  const ordered = (obj, order) => Object.entries(obj).sort((a, b) =>
    (order.indexOf(a[0]) + 1 || 1e9) - (order.indexOf(b[0]) + 1 || 1e9));
  const timeName = (k) => TIME_NAMES[k] || k.replace(/_/g, " ");
  const COLORS = { F: "#4c78a8", B: "#72b7b2", W: "#b279a2" };
  const TAIL_COLORS = ["#e45756", "#f58518", "#9d755d", "#bab0ac", "#54a24b"];

  // ---------------------------------------------------------------- Python's number formats, exactly
  // The page prints numbers as the command line prints them (f"{x:.1f}", f"{x:.3g}", f"{x:.1%}", f"{x:,.0f}").
  // JavaScript's toFixed and toExponential round exact ties (0.25 to one place) up; Python rounds them to even.
  function roundTie(text, keep, exact) {
    // `exact` carries more digits of the same number: a tie when the digit after `keep` is 5 and all after are 0
    const digits = exact.replace(/[^0-9]/g, "");
    const kept = text.replace(/[^0-9]/g, "");
    return { tie: /^50*$/.test(digits.slice(keep)), lastEven: Number(digits[keep - 1] || 0) % 2 === 0, kept };
  }
  function pyFixed(x, places) {
    if (!Number.isFinite(x)) return String(x);
    const up = Math.abs(x).toFixed(places);
    const exact = Math.abs(x).toFixed(Math.min(100, places + 25));
    const intDigits = exact.indexOf(".") < 0 ? exact.length : exact.indexOf(".");
    const t = roundTie(up, intDigits + places, exact);
    let out = up;
    if (t.tie && t.lastEven) out = exact.slice(0, intDigits + (places ? places + 1 : 0));
    return (x < 0 && Number(out) !== 0 ? "-" : x < 0 ? "-" : "") + out;
  }
  function pyExp(x, precision) {
    // x in exponential notation with `precision` significant digits, Python's ties: [mantissa, exponent]
    const ax = Math.abs(x);
    let s = ax.toExponential(precision - 1);
    const exact = ax.toExponential(Math.min(100, precision + 24));
    const t = roundTie(s.split("e")[0], precision, exact.split("e")[0]);
    if (t.tie && t.lastEven && exact.split("e")[1] === s.split("e")[1]) {
      const m = exact.split("e")[0];
      s = m.slice(0, precision === 1 ? 1 : precision + 1) + "e" + exact.split("e")[1];
    }
    const [mant, e] = s.split("e");
    return [mant, Number(e)];
  }
  function pyG(x, precision) {
    if (x === 0) return "0";
    if (!Number.isFinite(x)) return String(x);
    const [mant, e] = pyExp(x, precision);
    const sign = x < 0 ? "-" : "";
    const strip = (s) => (s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s);
    if (e < -4 || e >= precision) {
      return sign + strip(mant) + "e" + (e < 0 ? "-" : "+") + String(Math.abs(e)).padStart(2, "0");
    }
    return sign + strip(pyFixed(Math.abs(x), precision - 1 - e));
  }
  const pyPercent = (x, places) => pyFixed(x * 100, places) + "%";
  const pyThousands = (x) => {
    const s = pyFixed(x, 0);
    const neg = s.startsWith("-");
    return (neg ? "-" : "") + s.replace("-", "").replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  };
  const GB = (bytes) => pyFixed(bytes / 1e9, 1);

  // ---------------------------------------------------------------- small DOM helpers
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "dataset") Object.assign(e.dataset, v);
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  const out = (key, value, text, tag = "span") =>
    el(tag, { class: "plan-out", dataset: { key, value: value === undefined ? undefined : String(value) }, text });
  const shellQuote = (s) => (/^[A-Za-z0-9_./:=@%+,-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'");

  // ---------------------------------------------------------------- the worker, one per browser tab
  // Started before anything else the page does (Python takes seconds to start); told which distlab bundle to load
  // once the form has said. It outlives instant navigation: coming back to the page finds it warm.
  function planner(assets) {
    let p = window.__distlabPlanner;
    if (p && p.assets === assets) return p;
    const worker = new Worker(SCRIPT, { type: "module" }); // Pyodide runs in module workers only
    p = window.__distlabPlanner = { assets, bundle: null, worker, next: 1, waiting: new Map(), bootSeconds: null };
    p.ready = new Promise((resolve, reject) => {
      worker.addEventListener("message", (event) => {
        const msg = event.data;
        if (msg.type === "ready") {
          if (msg.error) reject(new Error(msg.error));
          else { p.bootSeconds = msg.seconds; resolve(msg.seconds); }
        } else if (msg.type === "result" && p.waiting.has(msg.id)) {
          p.waiting.get(msg.id)(msg);
          p.waiting.delete(msg.id);
        }
      });
      worker.addEventListener("error", (event) => reject(new Error(event.message || "the worker failed")));
    });
    p.load = (bundle) => {
      if (p.bundle === null) {
        p.bundle = bundle;
        worker.postMessage({ type: "bundle", assets, bundle });
      }
      return p.bundle === bundle;
    };
    p.run = (argv, files) => new Promise((resolve) => {
      const id = p.next++;
      p.waiting.set(id, resolve);
      worker.postMessage({ type: "run", id, argv, files });
    });
    worker.postMessage({ type: "start", assets });
    return p;
  }

  // ---------------------------------------------------------------- the form, from the command's parser
  function control(opt, spec) {
    const name = opt.dest;
    if (opt.kind === "switch") {
      return el("input", { type: "checkbox", name, checked: opt.default ? true : false });
    }
    if (opt.kind === "choice") {
      const none = opt.default === null ? [el("option", { value: "", text: opt.group.startsWith("layout")
        ? "searched" : "default" })] : [];
      return el("select", { name }, none, opt.choices.map((c) => el("option", { value: String(c), text: String(c),
        selected: String(c) === String(opt.default) })));
    }
    if (name === "model") {
      const models = Object.entries(spec.models).sort((a, b) => (a[1].moe - b[1].moe) || (a[1].params - b[1].params));
      return el("select", { name }, models.map(([key, m]) => el("option", { value: key, text: key === m.name ? key
        : `${key}: ${m.name}${m.moe ? " (MoE)" : ""}` })), el("option", { value: CUSTOM, text: "Custom shape…" }));
    }
    if (name === "gpu") {
      return el("select", { name }, spec.gpus.map((g) => el("option", { value: g, text: g,
        selected: g === opt.default })));
    }
    const numeric = opt.kind === "int" || opt.kind === "float";
    const attrs = { type: "text", name, autocomplete: "off", spellcheck: "false",
                    inputmode: numeric ? (opt.kind === "int" ? "numeric" : "decimal") : undefined,
                    value: opt.default === null ? "" : String(opt.default) };
    if (opt.default === null) attrs.placeholder = opt.group.startsWith("layout") ? "searched" : "default";
    if (name === "intra_bw" || name === "inter_bw") attrs.list = "plan-links";
    return el("input", attrs);
  }

  function field(opt, spec) {
    const c = control(opt, spec);
    c.dataset.flag = opt.flag;
    const id = "plan-" + opt.dest;
    c.id = id;
    const wide = opt.dest === "model" ? " plan-wide" : ""; // long names: the menu gets the whole width
    return el("div", { class: "plan-field" + (opt.kind === "switch" ? " plan-switch" : "") + wide, dataset: { dest: opt.dest } },
      el("label", { for: id }, el("code", { text: opt.flag })), c,
      el("small", { text: (opt.help || "").replace(/\s+/g, " ") }));
  }

  function shapeFields(spec) {
    return el("div", { class: "plan-shape", hidden: true },
      el("p", { class: "plan-note", text: `A model of your own: its shape is written to ${spec.custom_model_file} ` +
        `and given as --model ${spec.custom_model_file} (the command line takes the same file).` }),
      spec.shape_fields.map((f) => {
        const id = "plan-shape-" + f.name;
        const input = f.type === "bool"
          ? el("input", { type: "checkbox", id, name: "shape." + f.name, checked: f.default ? true : false })
          : el("input", { type: "text", id, name: "shape." + f.name, autocomplete: "off",
                          inputmode: f.type.startsWith("int") ? "numeric" : undefined,
                          placeholder: f.required ? "required" : f.default === null ? "default" : String(f.default) });
        return el("div", { class: "plan-field" + (f.type === "bool" ? " plan-switch" : "") },
          el("label", { for: id }, el("code", { text: f.name })), input);
      }));
  }

  function buildForm(spec) {
    const form = el("form", { class: "plan-form", novalidate: true });
    const byDest = new Map(spec.options.map((o) => [o.dest, o]));
    const used = new Set();
    const sets = SECTIONS.map(([title, dests]) => [title, dests.filter((d) => byDest.has(d)).map((d) => byDest.get(d))]);
    const groups = new Map();
    for (const o of spec.options) {
      if (sets.some(([, opts]) => opts.includes(o))) continue;
      const title = o.group === "options" || o.group === "optional arguments" ? "More options" : o.group;
      if (!groups.has(title)) groups.set(title, []);
      groups.get(title).push(o);
    }
    for (const [title, opts] of [...sets, ...groups]) {
      const fs = el("fieldset", { class: "plan-set", dataset: { section: title.split(" ")[0].toLowerCase() } },
        el("legend", { text: title[0].toUpperCase() + title.slice(1) }));
      for (const o of opts) {
        fs.append(field(o, spec));
        used.add(o.dest);
        if (o.dest === "model") fs.append(shapeFields(spec));
      }
      form.append(fs);
    }
    form.append(el("datalist", { id: "plan-links" }, spec.links.map((l) => el("option", { value: l }))));
    return form;
  }

  // ---------------------------------------------------------------- form <-> request <-> address
  const queryKey = (opt) => opt.flag.slice(2);

  function readRequest(form, spec) {
    const argv = ["plan"];
    const files = {};
    const query = new URLSearchParams();
    const shown = []; // the command line, without --json
    for (const opt of spec.options) {
      const c = form.elements[opt.dest];
      if (!c) continue;
      if (opt.kind === "switch") {
        if (c.checked !== Boolean(opt.default)) {
          const flag = c.checked ? opt.flag : "--no-" + opt.flag.slice(2);
          argv.push(flag);
          shown.push(flag);
          query.set(queryKey(opt), c.checked ? "on" : "off");
        }
        continue;
      }
      const value = c.value.trim();
      if (opt.dest === "model" && value === CUSTOM) {
        const shape = {};
        for (const f of spec.shape_fields) {
          const e = form.elements["shape." + f.name];
          if (f.type === "bool") {
            if (e.checked !== Boolean(f.default)) { shape[f.name] = e.checked; query.set("shape." + f.name, e.checked ? "on" : "off"); }
            continue;
          }
          const v = e.value.trim();
          if (v === "" || (!f.required && v === String(f.default))) continue;
          query.set("shape." + f.name, v);
          shape[f.name] = f.type.startsWith("int") && /^-?\d+$/.test(v) ? Number(v) : v;
        }
        files[spec.custom_model_file] = JSON.stringify(shape);
        argv.push(opt.flag, spec.custom_model_file);
        query.set(queryKey(opt), CUSTOM);
        continue;
      }
      if (value === "" || (opt.default !== null && value === String(opt.default))) continue;
      argv.push(opt.flag, value);
      shown.push(opt.flag, value);
      query.set(queryKey(opt), value);
    }
    argv.push("--json");
    const model = files[spec.custom_model_file];
    let cli = "distlab plan " + shown.map(shellQuote).join(" ");
    const modelFlag = spec.options.find((o) => o.dest === "model").flag;
    if (model !== undefined) {
      cli = `echo ${shellQuote(model)} > ${spec.custom_model_file} && distlab plan ${modelFlag} ` +
            `${spec.custom_model_file}` + (shown.length ? " " + shown.map(shellQuote).join(" ") : "");
    }
    return { argv, files, query, cli: cli.trimEnd() };
  }

  function setControl(c, value) {
    if (!c) return;
    if (c.type === "checkbox") { c.checked = value === "on" || value === "true" || value === "1"; return; }
    if (c.tagName === "SELECT" && ![...c.options].some((o) => o.value === value)) {
      c.append(el("option", { value, text: value })); // unknown to the page: the command line says what is wrong
    }
    c.value = value;
  }

  function applyQuery(form, spec, params) {
    for (const opt of spec.options) {
      const c = form.elements[opt.dest];
      if (!c) continue;
      const v = params.get(queryKey(opt));
      if (opt.kind === "switch") c.checked = v === null ? Boolean(opt.default) : v === "on" || v === "true";
      else if (v !== null) setControl(c, v);
      else if (opt.dest === "model") c.value = spec.default_model || c.options[0].value;
      else c.value = opt.default === null ? "" : String(opt.default);
    }
    for (const f of spec.shape_fields) {
      const e = form.elements["shape." + f.name];
      const v = params.get("shape." + f.name);
      if (f.type === "bool") e.checked = v === null ? Boolean(f.default) : v === "on";
      else e.value = v !== null ? v : f.required ? "" : f.default === null ? "" : String(f.default);
    }
    showShape(form, spec);
  }

  function showShape(form, spec) {
    const custom = form.elements.model.value === CUSTOM;
    form.querySelector(".plan-shape").hidden = !custom;
  }

  // ---------------------------------------------------------------- results
  function rankedTable(plans, selected, choose) {
    const head = ["#", "plan", "GB per GPU", "step (s)", "MFU", "MFU band", "tokens/s", "TFLOP/s per GPU"];
    return el("div", { class: "plan-scroll" }, el("table", { class: "plan-ranked" },
      el("thead", {}, el("tr", {}, head.map((h) => el("th", { text: h })))),
      el("tbody", {}, plans.map((p, i) => el("tr", {
        class: i === selected ? "plan-selected" : null, tabindex: 0, dataset: { index: i, label: p.label },
        "aria-selected": i === selected ? "true" : "false",
        onclick: () => choose(i), onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); choose(i); } },
      }, el("td", { text: String(i + 1) }), el("td", { text: p.label }),
        el("td", {}, out("memory_bytes_per_gpu", p.memory_bytes_per_gpu, GB(p.memory_bytes_per_gpu))),
        el("td", {}, out("step_seconds", p.step_seconds, pyG(p.step_seconds, 3))),
        el("td", {}, out("mfu", p.mfu, pyPercent(p.mfu, 1))),
        el("td", {}, out("mfu_band.0", p.mfu_band[0], pyPercent(p.mfu_band[0], 0)), "–",
          out("mfu_band.1", p.mfu_band[1], pyPercent(p.mfu_band[1], 0))),
        el("td", {}, out("tokens_per_second", p.tokens_per_second, pyThousands(p.tokens_per_second))),
        el("td", {}, out("tflops_per_gpu", p.tflops_per_gpu, pyFixed(p.tflops_per_gpu, 0))))))));
  }

  function bar(parts, total, prefix) {
    // a stacked bar of named parts (a share of the total each), with a table of their values
    const colors = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#9d755d", "#bab0ac"];
    const visible = parts.filter(([, v]) => v > 0);
    return el("div", { class: "plan-bar", role: "img", "aria-label": visible.map(([k]) => k).join(", ") },
      visible.map(([k, v], i) => el("span", { style: `width:${(100 * v / total).toFixed(3)}%;background:${colors[i % colors.length]}`,
                                              title: k, dataset: { part: prefix + k } })));
  }

  function detail(plan, index, isBest) {
    const memory = ordered(plan.memory_by_category, MEMORY_ORDER);
    const memTotal = plan.memory_bytes_per_gpu;
    const time = ordered(plan.step_breakdown, Object.keys(TIME_NAMES));
    const [lo, hi] = plan.mfu_band;
    const box = el("section", { class: "plan-detail", dataset: { index } },
      el("h3", { text: `${index + 1}. ${plan.label}` }),
      el("p", {}, "MFU ", out("detail.mfu", plan.mfu, pyPercent(plan.mfu, 1)), " by the model; published runs of plans the " +
        "model predicted this high came out between ", out("detail.mfu_band.0", lo, pyPercent(lo, 1)), " and ",
        out("detail.mfu_band.1", hi, pyPercent(hi, 1)), " (", el("a", { href: "../13-planner-validation/", text: "chapter 13" }),
        "). Hardware FLOPs utilisation (recomputation counted) ", out("detail.hfu", plan.hfu, pyPercent(plan.hfu, 1)),
        plan.mfu_causal !== undefined ? ["; counting only the causal half of attention, MFU ",
          out("detail.mfu_causal", plan.mfu_causal, pyPercent(plan.mfu_causal, 1))] : null, "."),
      el("div", { class: "plan-columns" },
        el("div", {}, el("h4", {}, "Memory per GPU: ", out("detail.memory_bytes_per_gpu", memTotal, GB(memTotal)), " GB"),
          bar(memory, memTotal, "memory."),
          el("table", { class: "plan-parts" }, el("tbody", {}, memory.map(([k, v]) => el("tr", {},
            el("td", { text: k }), el("td", {}, out("memory." + k, v, GB(v)), " GB"),
            el("td", { text: memTotal > 0 ? pyPercent(v / memTotal, 0) : "" }))),
            plan.host_bytes_per_gpu ? el("tr", {}, el("td", { text: "on the host (offloaded)" }),
              el("td", {}, out("host_bytes_per_gpu", plan.host_bytes_per_gpu, GB(plan.host_bytes_per_gpu)), " GB"),
              el("td")) : null))),
        el("div", {}, el("h4", {}, "Step: ", out("detail.step_seconds", plan.step_seconds, pyG(plan.step_seconds, 3)), " s"),
          bar(time.map(([k, v]) => [timeName(k), v]), plan.step_seconds, "time."),
          el("table", { class: "plan-parts" }, el("tbody", {}, time.map(([k, v]) => el("tr", {},
            el("td", { text: timeName(k) }), el("td", {}, out("time." + k, v, pyG(v, 3)), " s"),
            el("td", { text: pyPercent(v / plan.step_seconds, 1) }))))))),
      el("p", { class: "plan-note" }, `${plan.grad_accumulation} micro-batches of ${plan.micro_batch} per step on each ` +
        `data-parallel rank; ${plan.tokens_per_second ? pyThousands(plan.tokens_per_second) + " tokens/s; " : ""}` +
        `schedule ${plan.schedule}${plan.virtual > 1 ? ` with ${plan.virtual} chunks per stage` : ""}.`),
      isBest && plan.reasons ? [el("h4", { text: "Why this plan" }),
        el("ul", { class: "plan-why" }, plan.reasons.map((r) => el("li", { dataset: { key: "reason" }, text: r })))]
        : el("p", { class: "plan-note", text: "The planner explains its best plan (the first): choose it to read why." }),
      el("h4", { text: "One step, op by op" }),
      el("div", { class: "plan-timeline", dataset: { state: "waiting" } }),
      el("details", { class: "plan-raw" }, el("summary", { text: "Everything distlab plan --json says about this plan" }),
        el("pre", {}, el("code", { text: JSON.stringify(plan, null, 1) }))));
    return box;
  }

  // ---------------------------------------------------------------- the step timeline (the pipeline simulator)
  function pipelineArgv(plan) {
    const st = plan.stage_seconds;
    if (!st || !st.forward || !st.forward.length) return null;
    const argv = ["pipeline", "--stages", String(plan.pp), "--microbatches", String(plan.grad_accumulation),
                  "--schedule", plan.schedule];
    if (plan.virtual > 1) argv.push("--virtual", String(plan.virtual));
    argv.push("--forward", st.forward.map(String).join(","), "--backward", st.backward.map(String).join(","),
              "--p2p", String(st.p2p), "--timeline", "--json");
    return argv;
  }

  function drawTimeline(box, plan, sim, argv) {
    const tail = ordered(plan.step_breakdown, Object.keys(TIME_NAMES)).filter(([k, v]) => !IN_STAGE.has(k) && v > 0);
    const tailSeconds = tail.reduce((s, [, v]) => s + v, 0);
    const total = sim.step_time + tailSeconds;
    const stages = sim.timeline.length;
    const kinds = { F: "forward", B: sim.schedule === "zb-h1" ? "backward (input gradient)" : "backward",
                    W: "weight gradient" };
    // the interesting parts of a long step are its ends, where stages wait: a window of a few micro-batches' time
    const slowest = Math.max(...sim.timeline.map((s) => Math.max(...s.end.map((e, k) => e - s.start[k]))));
    const span = Math.min(total, (6 * stages + 10) * slowest);
    const views = span < 0.6 * total
      ? [["whole step", 0, total], ["its start", 0, span], ["its end", total - span, total]] : [["whole step", 0, total]];
    const rowH = Math.max(6, Math.min(22, Math.floor(360 / stages)));
    const left = 58, right = 10, top = 6, axis = 24;
    const canvas = el("canvas", { role: "img", "aria-label": `timeline of one step: ${stages} pipeline stage` +
      `${stages === 1 ? "" : "s"}, ${pyG(sim.step_time, 4)} s of pipeline, then ${pyG(tailSeconds, 3)} s after the ` +
      "last backward" });
    const caption = el("p", { class: "plan-caption", text: "Point at an op to see what it is." });
    let view = views[0];

    function paint() {
      const [, t0, t1] = view;
      const cssWidth = Math.max(320, box.clientWidth || 640);
      const cssHeight = top + stages * rowH + axis;
      const dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(cssWidth * dpr);
      canvas.height = Math.round(cssHeight * dpr);
      canvas.style.width = cssWidth + "px";
      canvas.style.height = cssHeight + "px";
      const ctx = canvas.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, cssWidth, cssHeight);
      const x = (t) => left + (cssWidth - left - right) * (t - t0) / (t1 - t0);
      const fg = getComputedStyle(box).color;
      ctx.font = "11px sans-serif";
      ctx.textBaseline = "middle";
      ctx.save();
      ctx.beginPath();
      ctx.rect(left, 0, cssWidth - left - right, cssHeight);
      ctx.clip();
      sim.timeline.forEach((s, d) => {
        const y = top + d * rowH;
        for (let k = 0; k < s.kind.length; k++) {
          if (s.end[k] < t0 || s.start[k] > t1) continue;
          ctx.fillStyle = COLORS[s.kind[k]];
          ctx.globalAlpha = s.chunk[k] % 2 ? 0.65 : 1;
          const a = x(s.start[k]), b = x(s.end[k]);
          ctx.fillRect(a, y + 1, Math.max(0.5, b - a - (b - a > 3 ? 1 : 0)), rowH - 2);
        }
        ctx.globalAlpha = 1;
        let t = sim.step_time;
        tail.forEach(([, v], i) => {
          ctx.fillStyle = TAIL_COLORS[i % TAIL_COLORS.length];
          ctx.fillRect(x(t), y + 1, Math.max(0.5, x(t + v) - x(t)), rowH - 2);
          t += v;
        });
      });
      ctx.restore();
      ctx.fillStyle = fg;
      ctx.strokeStyle = fg;
      sim.timeline.forEach((s, d) => { if (rowH >= 9) ctx.fillText(`stage ${d}`, 2, top + d * rowH + rowH / 2); });
      const yAxis = top + stages * rowH + 2;
      ctx.beginPath(); ctx.moveTo(left, yAxis); ctx.lineTo(cssWidth - right, yAxis); ctx.stroke();
      const rough = (t1 - t0) / 6, mag = Math.pow(10, Math.floor(Math.log10(rough)));
      const step = [1, 2, 5, 10].map((m) => m * mag).find((v) => v >= rough);
      ctx.textAlign = "center";
      for (let t = Math.ceil(t0 / step) * step; t <= t1 + 1e-9 * t1; t += step) {
        ctx.beginPath(); ctx.moveTo(x(t), yAxis); ctx.lineTo(x(t), yAxis + 4); ctx.stroke();
        ctx.fillText(pyG(t, 4) + " s", Math.min(Math.max(x(t), left + 12), cssWidth - 24), yAxis + 14);
      }
      ctx.textAlign = "start";
    }

    canvas.addEventListener("mousemove", (event) => {
      const [, t0, t1] = view;
      const r = canvas.getBoundingClientRect();
      const d = Math.floor((event.clientY - r.top - top) / rowH);
      const t = t0 + (event.clientX - r.left - left) / (r.width - left - right) * (t1 - t0);
      if (d < 0 || d >= stages || t < t0 || t > t1) return;
      if (t >= sim.step_time) {
        let a = sim.step_time;
        for (const [k, v] of tail) {
          if (t < a + v) { caption.textContent = `${timeName(k)}: ${pyG(a, 4)}–${pyG(a + v, 4)} s, after the last backward`; return; }
          a += v;
        }
        return;
      }
      const s = sim.timeline[d];
      let lo = 0, hi = s.start.length - 1;
      while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (s.start[mid] <= t) lo = mid; else hi = mid - 1; }
      if (t < s.start[lo] || t > s.end[lo]) { caption.textContent = `stage ${d} idles (the bubble) at ${pyG(t, 4)} s`; return; }
      caption.textContent = `stage ${d}: ${kinds[s.kind[lo]]} of micro-batch ${s.microbatch[lo] + 1}` +
        (sim.virtual > 1 ? `, chunk ${s.chunk[lo] + 1} of ${sim.virtual}` : "") +
        `, ${pyG(s.start[lo], 4)}–${pyG(s.end[lo], 4)} s`;
    });
    const buttons = views.length > 1 ? el("span", { class: "plan-views" }, "Show ", views.map((v, i) => el("button", {
      type: "button", class: "plan-view" + (i ? "" : " plan-view--on"), text: v[0], onclick: (event) => {
        view = v;
        buttons.querySelectorAll("button").forEach((b) => b.classList.toggle("plan-view--on", b === event.target));
        paint();
      } }))) : null;
    const legend = el("p", { class: "plan-legend" },
      Object.entries(kinds).filter(([k]) => sim.timeline.some((s) => s.kind.includes(k)))
        .map(([k, name]) => el("span", {}, el("i", { style: `background:${COLORS[k]}` }), name)),
      tail.map(([k], i) => el("span", {}, el("i", { style: `background:${TAIL_COLORS[i % TAIL_COLORS.length]}` }),
        timeName(k))),
      buttons);
    const busy = Math.max(...sim.busy);
    box.replaceChildren(legend, canvas, caption,
      el("p", { class: "plan-note" }, "Simulated by distlab's pipeline simulator from this plan's per-stage times " +
        "(a micro-batch's forward and backward with its recomputation and exposed tensor, context and " +
        "expert-parallel communication" + (sim.virtual > 1 ? "; lighter boxes are odd chunks" : "") + "): the " +
        "pipeline takes ", out("timeline.pipeline_seconds", sim.step_time, pyG(sim.step_time, 4)), " s, in which the " +
        "busiest stage idles ", out("timeline.idle_seconds", sim.step_time - busy, pyG(sim.step_time - busy, 3)),
        " s; then ", out("timeline.tail_seconds", tailSeconds, pyG(tailSeconds, 3)), " s after the last backward. " +
        "One step: ", out("timeline.step_seconds", total, pyG(total, 4)), " s (the plan's: ",
        pyG(plan.step_seconds, 4), " s). The same simulation in a terminal: ",
        el("code", { class: "plan-cli-small", text: "distlab " + argv.filter((a) => a !== "--json" && a !== "--timeline")
          .map(shellQuote).join(" ") })));
    paint();
    box.dataset.state = "drawn";
    box.dataset.argv = JSON.stringify(argv);
    box.dataset.ops = String(sim.timeline.reduce((n, s) => n + s.kind.length, 0));
  }

  // ---------------------------------------------------------------- the page
  async function main(root) {
    const assets = new URL(root.dataset.assets || "../assets/", location.href).href;
    let p = planner(assets);
    root.dataset.state = "starting";
    const status = el("p", { class: "plan-status", dataset: { key: "status" }, text: "Loading the form…" });
    root.replaceChildren(status);
    let spec;
    try {
      const r = await fetch(assets + "plan/form.json");
      spec = await r.json();
    } catch (err) {
      status.textContent = "Could not load the planner's form: " + err;
      root.dataset.state = "failed";
      return;
    }
    spec.default_model = spec.models["7B"] ? "7B" : Object.keys(spec.models)[0];
    const form = buildForm(spec);
    const cli = el("code", { class: "plan-cli", dataset: { key: "cli" } });
    const copy = el("button", { type: "button", class: "md-button", text: "Copy CLI command" });
    const planButton = el("button", { type: "submit", class: "md-button md-button--primary", text: "Plan" });
    const error = el("p", { class: "plan-error", dataset: { key: "error" }, role: "alert" });
    const results = el("div", { class: "plan-results" });
    form.append(el("div", { class: "plan-actions" }, planButton, copy, cli));
    root.replaceChildren(form, status, error, results);
    applyQuery(form, spec, new URLSearchParams(location.search));

    if (!p.load(spec.bundle)) { // the site changed under this tab since its worker started: start again
      p.worker.terminate();
      window.__distlabPlanner = null;
      p = planner(assets);
      p.load(spec.bundle);
    }
    let current = null; // the request whose answer is shown
    let latest = null;
    let busy = false;
    let plans = null;
    const chosen = () => Math.max(0, (parseInt(new URLSearchParams(location.search).get("choose"), 10) || 1) - 1);
    let selected = chosen(); // the plan the address asks for (choose=2: the second), else the best
    let timelineToken = 0;

    function choose(i, { pushAddress = true } = {}) {
      if (!plans || i < 0 || i >= plans.length) return;
      selected = i;
      results.querySelectorAll("tr[data-index]").forEach((tr) => {
        const on = Number(tr.dataset.index) === i;
        tr.classList.toggle("plan-selected", on);
        tr.setAttribute("aria-selected", on ? "true" : "false");
      });
      const d = detail(plans[i], i, i === 0);
      const old = results.querySelector(".plan-detail");
      if (old) old.replaceWith(d); else results.append(d);
      if (pushAddress) address(current, false);
      timeline(d.querySelector(".plan-timeline"), plans[i]);
    }

    async function timeline(box, plan) {
      const token = ++timelineToken;
      const argv = pipelineArgv(plan);
      if (!argv) { box.dataset.state = "none"; box.textContent = "No per-stage times in this plan."; return; }
      const ops = plan.pp * plan.grad_accumulation * plan.virtual * (plan.schedule === "zb-h1" ? 3 : 2);
      if (ops > TIMELINE_MAX_OPS) {
        box.dataset.state = "too-large";
        box.textContent = `${pyThousands(ops)} ops in one step: too many to draw here (the command line simulates ` +
                          `them: distlab ${argv.filter((a) => a !== "--timeline" && a !== "--json").map(shellQuote).join(" ")}).`;
        return;
      }
      box.dataset.state = "drawing";
      box.textContent = "Simulating the step…";
      const res = await p.run(argv, {});
      if (token !== timelineToken) return; // another plan was chosen meanwhile
      if (res.rc !== 0) { box.dataset.state = "failed"; box.textContent = res.stderr.trim(); return; }
      drawTimeline(box, plan, JSON.parse(res.stdout), argv);
    }

    function address(req, push) {
      const q = new URLSearchParams(req.query);
      if (selected) q.set("choose", String(selected + 1));
      const url = location.pathname + (q.toString() ? "?" + q : "") + location.hash;
      if (url !== location.pathname + location.search + location.hash) {
        history[push ? "pushState" : "replaceState"](history.state, "", url);
      }
    }

    async function plan() {
      const req = readRequest(form, spec);
      if (current && JSON.stringify(req.argv) !== JSON.stringify(current.argv)) selected = 0; // a new question
      latest = req;
      cli.textContent = req.cli;
      root.dataset.cli = req.cli;
      address(req, false);
      if (busy) return; // planned when the running request ends
      busy = true;
      while (latest) {
        const now = latest;
        latest = null;
        root.dataset.state = "planning";
        status.textContent = p.bootSeconds === null ? "Starting Python in your browser (Pyodide)…" : "Planning…";
        const started = performance.now();
        let res;
        try {
          await p.ready;
          res = await p.run(now.argv, now.files);
        } catch (err) {
          res = { rc: -1, stdout: "", stderr: String(err && err.message || err) };
        }
        if (latest && JSON.stringify(latest.argv) !== JSON.stringify(now.argv)) continue; // stale: plan the newer
        show(now, res, (performance.now() - started) / 1000);
      }
      busy = false;
    }

    function show(req, res, wall) {
      current = req;
      root.dataset.argv = JSON.stringify(req.argv);
      root.dataset.files = JSON.stringify(req.files);
      root.dataset.seconds = String(res.seconds === undefined ? "" : res.seconds);
      error.textContent = "";
      if (res.rc === 0) {
        plans = JSON.parse(res.stdout);
        if (selected >= plans.length) selected = 0;
        results.replaceChildren(
          el("p", { class: "plan-summary" }, `The best ${plans.length} plan${plans.length === 1 ? "" : "s"}, fastest first, ` +
            `as distlab planned them in your browser in ${pyG(res.seconds, 2)} s` +
            `${p.bootSeconds !== null ? ` (Python started in ${pyG(p.bootSeconds, 2)} s)` : ""}. Choose one:`),
          rankedTable(plans, selected, (i) => choose(i)));
        choose(selected, { pushAddress: false });
        root.dataset.state = "planned";
        status.textContent = "";
      } else {
        plans = null;
        results.replaceChildren();
        const line = res.stderr.trim() || `distlab exited with status ${res.rc}`;
        error.textContent = line;
        root.dataset.state = res.rc === 2 ? "refused" : "failed";
        status.textContent = res.rc === 2 ? "distlab plan refuses this request (exit status 2), as it would in a " +
          "terminal:" : "distlab failed:";
      }
      root.dataset.wall = String(wall);
      // when the answer was shown, on the page's clock (performance.now(): milliseconds since the page opened)
      root.dataset.shownAt = String(performance.now());
      if (!root.dataset.firstPlanAt) root.dataset.firstPlanAt = root.dataset.shownAt;
    }

    let debounce = null;
    form.addEventListener("input", (event) => {
      if (event.target.name === "model") onModel();
      clearTimeout(debounce);
      // a menu or a box plans at once; typing waits for a pause (Enter plans at once)
      debounce = setTimeout(plan, event.target.tagName === "SELECT" || event.target.type === "checkbox" ? 0 : 250);
    });
    form.addEventListener("submit", (event) => { event.preventDefault(); clearTimeout(debounce); plan(); });
    let lastPreset = form.elements.model.value;
    function onModel() {
      const value = form.elements.model.value;
      if (value === CUSTOM) {
        const preset = spec.models[lastPreset];
        if (preset && preset.shape) { // start from the model chosen before
          for (const f of spec.shape_fields) {
            const e = form.elements["shape." + f.name];
            const v = f.name === "name" ? "custom" : preset.shape[f.name];
            if (f.type === "bool") e.checked = Boolean(v);
            else e.value = v === null || v === undefined ? "" : String(v);
          }
        }
      } else lastPreset = value;
      showShape(form, spec);
    }
    copy.addEventListener("click", async () => {
      const text = readRequest(form, spec).cli;
      try {
        await navigator.clipboard.writeText(text);
        copy.textContent = "Copied";
      } catch {
        const range = document.createRange(); // no clipboard access: select it for the reader to copy
        range.selectNodeContents(cli);
        getSelection().removeAllRanges();
        getSelection().addRange(range);
        copy.textContent = "Selected: press Ctrl+C";
      }
      setTimeout(() => { copy.textContent = "Copy CLI command"; }, 1500);
    });
    const here = location.pathname;
    window.addEventListener("popstate", function onPop() {
      if (!document.body.contains(root)) { window.removeEventListener("popstate", onPop); return; }
      if (location.pathname !== here) return; // back to another page: Material's instant navigation handles it
      applyQuery(form, spec, new URLSearchParams(location.search));
      current = null; // the address is the question now, its choice of plan included
      selected = chosen();
      plan();
    });
    p.ready.then(() => { if (root.dataset.state === "planning") status.textContent = "Planning…"; }, () => {});
    plan();
  }

  window.__distlabStartPlanner = planner; // the Trace page (assets/trace.js) runs `distlab trace` in this worker
  const root = document.getElementById("distlab-plan");
  if (root && !root.dataset.state) main(root);
})();
