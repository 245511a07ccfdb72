// The Trace page (docs/trace.md): `distlab trace` on the reader's own files, in the reader's browser.
//
// Nothing here diagnoses. The page reads the dropped files (gunzipping .gz with the browser's DecompressionStream),
// and the Plan page's worker (assets/plan.js, loaded first: Pyodide with the distlab bundle, which carries the
// `trace` command) runs `distlab trace FILES --json --timeline` on them. The page draws what the command prints:
// time by cause per rank, the ranked causes with their chapter, the dominant operators, what the traces cannot tell,
// and a timeline of the slowest step. tests/site/test_trace_page.py feeds it recorded traces and compares with the
// command line.
(function () {
  "use strict";
  const COLORS = {
    compute: "#2e7d32", optimizer: "#81c784", communication_exposed: "#c62828", data_loading: "#1565c0",
    synchronisation: "#6a1b9a", launch_overhead: "#ef6c00", host_other: "#9e9e9e",
  };
  const LABELS = {
    compute: "compute", optimizer: "optimizer", communication_exposed: "exposed communication",
    data_loading: "data loading", synchronisation: "synchronisation", launch_overhead: "launch overhead",
    host_other: "unrecorded",
  };
  const ms = (s) => (s === null || s === undefined ? "-" : (1e3 * s).toFixed(1));

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = v;
      else if (k === "dataset") Object.assign(e.dataset, v);
      else e.setAttribute(k, v);
    }
    e.append(...children.filter((c) => c !== null && c !== undefined));
    return e;
  }

  async function readFile(name, blob) {
    const head = new Uint8Array(await blob.slice(0, 2).arrayBuffer());
    if (head[0] === 0x1f && head[1] === 0x8b) {
      const text = await new Response(blob.stream().pipeThrough(new DecompressionStream("gzip"))).text();
      return [name.replace(/\.gz$/, ""), text];
    }
    return [name, await blob.text()];
  }

  function table(head, rows, key) {
    return el("table", { dataset: { key } },
      el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))),
      el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", { text: String(c) }))))));
  }

  function drawTimeline(t, ranks) {
    const svgNS = "http://www.w3.org/2000/svg";
    const W = 900, left = 60, lane = 26, gap = 14;
    const end = Math.max(...t.pieces.map((p) => p[2]), 1e-9);
    const H = ranks.length * (lane + gap) + 40;
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("width", "100%");
    svg.dataset.key = "timeline";
    svg.dataset.step = String(t.step);
    svg.dataset.pieces = String(t.pieces.length);
    const x = (s) => left + (W - left - 10) * (s / end);
    const add = (tag, attrs, text) => {
      const e = document.createElementNS(svgNS, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (text) e.textContent = text;
      svg.append(e);
      return e;
    };
    ranks.forEach((r, i) => {
      const y = i * (lane + gap) + 10;
      add("text", { x: 4, y: y + lane / 2 + 4, "font-size": 12, fill: "currentColor" }, `rank ${r}`);
      for (const [rank, a, b, cause] of t.pieces) {
        if (rank !== r) continue;
        const rect = add("rect", { x: x(a), y, width: Math.max(0.5, x(b) - x(a)), height: lane, fill: COLORS[cause] });
        rect.dataset.cause = cause;
        add("title", {}, "");
      }
      for (const [rank, a, b] of t.communication) {
        if (rank === r) add("rect", { x: x(a), y: y + lane + 2, width: Math.max(0.5, x(b) - x(a)), height: 4, fill: "#c62828", opacity: 0.6 });
      }
    });
    const yAxis = ranks.length * (lane + gap) + 20;
    add("text", { x: left, y: yAxis, "font-size": 11, fill: "currentColor" }, "0 ms");
    add("text", { x: W - 80, y: yAxis, "font-size": 11, fill: "currentColor" }, `${ms(end)} ms`);
    const legend = el("p", { class: "trace-legend" }, ...Object.keys(COLORS).map((k) =>
      el("span", { style: `margin-right:1em` }, el("span", { style: `display:inline-block;width:0.9em;height:0.9em;background:${COLORS[k]};margin-right:0.3em` }), LABELS[k])),
      el("span", {}, " (thin red line under a rank: its collectives, overlapped or not)"));
    return el("div", {}, el("p", { text: `The slowest step, ProfilerStep#${t.step}, every rank on one clock:` }), svg, legend);
  }

  function render(report, out) {
    const parts = [];
    if (report.ranks) {
      const top = report.causes.find((c) => c.cause === report.top_cause);
      parts.push(el("p", { class: "trace-top" }, el("strong", { text: "Top cause: " }),
        el("code", { dataset: { key: "top-cause" }, text: report.top_cause }), ` — ${top.means}. `,
        el("a", { href: "../" + top.chapter, text: "Read why" })));
      const keys = Object.keys(COLORS);
      parts.push(table(["rank", "step (ms)", ...keys.map((k) => LABELS[k] + " (ms)")],
        report.ranks.map((r) => [r.rank, ms(r.step_s), ...keys.map((k) => ms(r.time_by_cause[k]))]), "ranks"));
      if (report.straggler_rank !== null) {
        parts.push(el("p", { dataset: { key: "straggler" }, text:
          `Slowest rank: ${report.straggler_rank}, ${ms(report.straggler_excess_s)} ms per step more work of its own than the others.` }));
      }
      parts.push(el("p", { text: `Exposed communication ${ms(report.exposed_communication_s)} ms per step (mean of ranks); ` +
        `${(100 * report.unattributed_share).toFixed(0)} % of the step had nothing recorded running (left out of the scores).` }));
      if (report.timeline) parts.push(drawTimeline(report.timeline, report.ranks.map((r) => r.rank)));
      parts.push(el("h3", { text: "Likely causes, ranked" }));
      parts.push(el("ol", { dataset: { key: "causes" } }, ...report.causes.map((c) =>
        el("li", { dataset: { cause: c.cause, share: String(c.share_of_step) } },
          el("code", { text: c.cause }), ` ${(100 * c.share_of_step).toFixed(1)} % — ${c.means}${c.measurable ? "" : " (not measurable from these traces)"}. Fix: ${c.what_to_do}. `,
          el("a", { href: "../" + c.chapter, text: "chapter" })))));
      parts.push(el("h3", { text: "Dominant operators" }));
      parts.push(table(["operator", "ms per step", "calls per step"],
        report.dominant_ops.map((o) => [o.name, ms(o.seconds_per_step), o.calls_per_step.toFixed(1)]), "ops"));
      for (const m of report.missing) parts.push(el("p", { class: "trace-missing", text: `Cannot tell (${m.cause}): ${m.why}` }));
    }
    for (const log of report.nccl_logs || []) {
      parts.push(el("h3", { text: `NCCL log ${log.file}: version ${log.version || "not printed"}` }));
      parts.push(el("ul", {}, ...log.findings.map((f) => el("li", { text: `${f.what} (${f.count}x): ${f.means}` })),
        ...log.warnings.map((w) => el("li", { text: "WARN " + w }))));
    }
    for (const s of report.nccl_tests || []) {
      parts.push(el("p", { text: `nccl-tests ${s.file}: ${s.collective || "?"}, ${s.ranks || "?"} ranks, peak busbw ` +
        `${s.peak_busbw_gbps} GB/s` + (s.problems.length ? "; checks: " + s.problems.join("; ") : "; columns agree") }));
    }
    out.replaceChildren(...parts);
  }

  async function main(root) {
    root.dataset.state = "starting";
    const assets = new URL(root.dataset.assets || "../assets/", location.href).href;
    let p = window.__distlabStartPlanner(assets);
    const status = el("p", { dataset: { key: "status" }, text: "Starting Python…" });
    const input = el("input", { type: "file", multiple: "", "aria-label": "trace files" });
    const sample = el("button", { type: "button", class: "md-button", text: "Try the recorded straggler run" });
    const drop = el("div", { class: "trace-drop", style: "border:2px dashed #888;padding:1.2em;text-align:center" },
      "Drop trace files (one per rank), NCCL logs, nccl-tests output here, or ", input, " ", sample);
    const error = el("p", { dataset: { key: "error" }, role: "alert" });
    const out = el("div", { class: "trace-report" });
    root.replaceChildren(drop, status, error, out);
    const spec = await fetch(assets + "plan/form.json").then((r) => r.json());
    if (!p.load(spec.bundle)) {
      p.worker.terminate();
      window.__distlabPlanner = null;
      p = window.__distlabStartPlanner(assets);
      p.load(spec.bundle);
    }
    p.ready.then(() => { if (root.dataset.state === "starting") { status.textContent = "Ready: drop your files."; root.dataset.state = "ready"; } },
      (err) => { status.textContent = "Python failed to start: " + err; root.dataset.state = "failed"; });

    async function analyse(named) {
      root.dataset.state = "reading";
      error.textContent = "";
      status.textContent = "Reading " + named.map(([n]) => n).join(", ") + "…";
      const begun = performance.now();
      const files = Object.fromEntries(await Promise.all(named.map(([n, blob]) => readFile(n, blob))));
      await p.ready;
      const argv = ["trace", ...Object.keys(files), "--json", "--timeline"];
      const res = await p.run(argv, files);
      root.dataset.argv = JSON.stringify(argv);
      if (res.rc !== 0) {
        error.textContent = (res.stderr || "").trim();
        out.replaceChildren();
        root.dataset.state = "refused";
        return;
      }
      root.dataset.report = res.stdout;
      render(JSON.parse(res.stdout), out);
      status.textContent = `Read in ${((performance.now() - begun) / 1000).toFixed(1)} s (distlab trace ${Object.keys(files).join(" ")}).`;
      root.dataset.state = "done";
    }
    input.addEventListener("change", () => analyse([...input.files].map((f) => [f.name, f])));
    drop.addEventListener("dragover", (e) => e.preventDefault());
    drop.addEventListener("drop", (e) => { e.preventDefault(); analyse([...e.dataTransfer.files].map((f) => [f.name, f])); });
    sample.addEventListener("click", async () => {
      const names = ["straggler-rank0.json.gz", "straggler-rank1.json.gz"];
      const blobs = await Promise.all(names.map((n) => fetch(assets + "trace/" + n).then((r) => r.blob())));
      analyse(names.map((n, i) => [n, blobs[i]]));
    });
  }

  const root = document.getElementById("distlab-trace");
  if (root && !root.dataset.state && window.__distlabStartPlanner) main(root);
})();
