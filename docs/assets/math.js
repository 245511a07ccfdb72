// Offline math: render every pymdownx.arithmatex span/div with the KaTeX that the site ships
// (assets/katex/, installed from npm by `make setup`, copied into the build by gen/calculator.py).
// Material's instant navigation swaps pages without reloading scripts, so render on every page it shows.
(function () {
  "use strict";

  function render() {
    if (!window.katex) {
      console.error("KaTeX is missing: assets/katex/katex.min.js did not load");
      return;
    }
    document.querySelectorAll(".arithmatex").forEach((el) => {
      if (el.dataset.rendered) return;
      const display = el.tagName === "DIV";
      const tex = el.textContent.trim().replace(/^\\[([]/, "").replace(/\\[)\]]$/, "");
      try {
        window.katex.render(tex, el, { displayMode: display, throwOnError: true });
        el.dataset.rendered = "true";
      } catch (exc) {
        console.error(`KaTeX cannot render ${JSON.stringify(tex)}: ${exc.message}`);
      }
    });
  }

  // Search results quote the page's text with the TeX still in its \( \) and \[ \] delimiters:
  // typeset those too, as the results appear.
  const DELIMITED = /\\\(([\s\S]+?)\\\)|\\\[([\s\S]+?)\\\]/g;
  function renderDelimited(root) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const nodes = [];
    while (walker.nextNode()) if (walker.currentNode.data.includes("\\")) nodes.push(walker.currentNode);
    for (const node of nodes) {
      const text = node.data, frag = document.createDocumentFragment();
      let last = 0;
      for (const m of text.matchAll(DELIMITED)) {
        frag.append(text.slice(last, m.index));
        const span = document.createElement("span");
        try {
          window.katex.render(m[1] ?? m[2], span, { displayMode: false, throwOnError: true });
        } catch (exc) {
          span.textContent = m[0];  // a fragment cut mid-formula by the snippet: leave it as it is
        }
        frag.append(span);
        last = m.index + m[0].length;
      }
      if (last === 0) continue;
      frag.append(text.slice(last));
      node.replaceWith(frag);
    }
  }
  const watched = new WeakSet();
  function watchSearch() {
    const list = document.querySelector(".md-search-result__list");
    if (!list || watched.has(list) || !window.katex) return;
    watched.add(list);
    new MutationObserver(() => renderDelimited(list)).observe(list, { childList: true, subtree: true });
  }

  function all() {
    render();
    watchSearch();
  }
  if (window.document$) window.document$.subscribe(all);
  else document.addEventListener("DOMContentLoaded", all);
})();
