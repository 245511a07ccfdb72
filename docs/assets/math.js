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

  if (window.document$) window.document$.subscribe(render);
  else document.addEventListener("DOMContentLoaded", render);
})();
