"""The build machinery: placeholders, claims that fail the build, and the strict build of the real site."""

import os
import subprocess
import sys
import textwrap

import pytest

from distlab.core.results import Result
from distlab.core.site import Page


def _page_with(result: Result) -> Page:
    page = Page("demo.md")
    page.results[result.name] = result
    page.stored[result.name] = []
    return page


def test_placeholders_render_values_with_units_and_formats():
    r = Result("exp")
    r.add("total", 107_814_649_856, "B")
    r.add("n", 6_738_415_616, "params")
    out = _page_with(r).render("A {{ exp.total }} B {{ exp.total | GiB }} C {{ exp.n | value }}")
    assert out.startswith("A 108 GB B 100 GiB C 6,738,415,616")


def test_unknown_placeholder_fails_naming_page_and_known_names():
    """Would catch a typo rendering as literal braces (or blank) on the published page."""
    r = Result("exp")
    r.add("total", 1, "B")
    with pytest.raises(Exception, match=r"demo\.md.*totl.*known: total"):
        _page_with(r).render("{{ exp.totl }}")
    with pytest.raises(Exception, match="not run by this page"):
        _page_with(r).render("{{ other.total }}")


def test_fact_placeholder_cites_its_source():
    out = _page_with(Result("exp")).render("{{ fact gpus.H100-SXM.hbm_gb }}")
    assert out.startswith("80 GB (source[^h100-datasheet])")  # never on the number: "80 GB³"
    assert "[^h100-datasheet]: [NVIDIA H100" in out


def test_a_fact_that_is_not_a_number_fails_naming_the_page():
    """Would catch a text fact (a GPU's name) reaching the number formatting as a TypeError traceback that names
    no page."""
    with pytest.raises(Exception, match=r"demo\.md.*gpus\.H100-SXM\.name.*not a number"):
        _page_with(Result("exp")).render("{{ fact gpus.H100-SXM.name }}")


def test_a_fact_marker_goes_after_the_sentence_or_the_row_label():
    """Would catch "132[^1] SMs" (read as 132¹, copied as 1321) and "80 GB[^3]" (read as GB³): the marker goes after
    the sentence (not after "e.g." or "et al."), in a table after the row's label, in an admonition's title into
    its body; two facts of one source in one sentence give one marker."""
    page = _page_with(Result("exp"))
    text = (
        "An H100 has {{ fact gpus.H100-SXM.sms }} SMs, e.g. at\n{{ fact gpus.H100-SXM.hbm_tbps }} and "
        "{{ fact gpus.H100-SXM.hbm_gb }}. Next sentence.\n\n"
        "| row | {{ fact gpus.H100-SXM.hbm_gb }} |\n|---|---|\n\n"
        '??? question "Is {{ fact gpus.H100-SXM.hbm_gb }} enough?"\n    Body one. Body two.\n\n'
        "- HBM: {{ fact gpus.H100-SXM.hbm_gb }}\n"
    )
    out = page.render(text)
    assert "An H100 has 132 SMs, e.g. at\n3.35 TB/s and 80 GB.[^hopper-whitepaper][^h100-datasheet] Next" in out
    assert "| row[^h100-datasheet] | 80 GB |" in out
    assert '"Is 80 GB enough?"\n    Body one.[^h100-datasheet] Body two.' in out
    assert "- HBM[^h100-datasheet]: 80 GB" in out


@pytest.mark.parametrize(
    "glued",
    ["ran 2[^x] epochs", "132[^a] SMs", "80 GB[^b] of HBM", "at 3.35 TB/s[^c].", "a **16**[^d] here", "2.5x[^e] fast"],
)
def test_a_footnote_marker_glued_to_a_number_fails_the_build(glued):
    """The check of issue 15: a marker right after a digit or a number's unit stops the build, naming the page."""
    with pytest.raises(Exception, match=r"demo\.md: footnote marker right after a number"):
        _page_with(Result("exp")).render(f"Text that {glued} more.\n\n[^x]: a source\n")


def test_footnote_markers_after_nouns_and_sentences_pass():
    out = _page_with(Result("exp")).render("It has 132 SMs[^a] and ran 2 epochs.[^b]\n\n[^a]: s\n[^b]: t\n")
    assert "132 SMs[^a]" in out


def test_the_same_quantity_with_two_values_on_two_pages_fails_the_build():
    """Would catch chapter 10's "67.4 %" in the text against "68.2 %" in a table when both come from one experiment's
    quantity re-measured between pages: one build, one value per `experiment.quantity`, compared as value and unit
    (so 16 GB on one page and 16,000,000,000 B on another is the same)."""
    from distlab.core.site import Page, Shown

    shown = Shown()
    first, second, third = Result("exp"), Result("exp"), Result("exp")
    first.add("up", 0.674, "fraction")
    second.add("up", 0.674, "fraction")
    third.add("up", 0.682, "fraction")
    for path, result, spec in (("a.md", first, ""), ("b.md", second, " | value")):
        page = Page(path, shown)
        page.results["exp"], page.stored["exp"] = result, []
        page.render("{{ exp.up" + spec + " }}")
    page = Page("c.md", shown)
    page.results["exp"], page.stored["exp"] = third, []
    with pytest.raises(Exception, match=r"page c\.md: exp\.up shows 68\.2 %.*page a\.md showed 67\.4 %"):
        page.render("{{ exp.up }}")


def test_tables_are_stamped_by_the_origin_of_their_numbers():
    """Would catch chapter 1's formula-only 7B table stamped "measured on AMD EPYC ...": a measured experiment's
    table made from formulas says computed; its measured table names the machine."""
    r = Result("exp", kind="measured", provenance={"hardware": "CPU X", "code_version": "abc"})
    r.table("formula", ["a"], [[1]], kind="computed")
    r.table("timed", ["a"], [[2]])
    out = _page_with(r).render("{{ table exp.formula }}\n\n{{ table exp.timed }}")
    formula, timed = out.split("| 2 |")
    assert "computed" in formula and "measured" not in formula.replace("not measured", "")
    assert "measured on CPU X" in timed
    with pytest.raises(ValueError, match="kind must be one of"):
        r.table("bad", ["a"], [[1]], kind="guessed")


def test_stored_results_still_to_come_are_one_line_and_published_numbers_stand_in():
    """Issue 15 item 8: no "No stored GPU results ... None exist yet" box per experiment; one line per page names
    what is still to be measured on a GPU, and a published table (with its stamp) stands in where one exists."""
    a, b, pub = Result("a"), Result("b"), Result("pub", kind="computed")
    pub.table("fa2", ["kernel", "TFLOP/s"], [["FA2", 335]])
    page = Page("demo.md")
    for r in (a, b, pub):
        page.results[r.name], page.stored[r.name] = r, []
    out = page.render("x\n\n{{ stored a }}\n\n{{ stored b | published pub.fa2 }}\n\nend")
    assert "None exist yet" not in out and "No stored GPU results" not in out
    assert out.count("What a GPU run will add:") == 1 and "Still to come" not in out and "!!!" not in out
    assert "`a` (" in out and "`b` (" in out
    assert "until our own GPU measurement of `b` replaces them" in out and "| FA2 | 335 |" in out


def test_claims_box_lists_every_claim():
    r = Result("exp")
    r.claim("sixteen", 16, 16, unit="B/param")
    out = _page_with(r).render("text\n{{ claims }}\nend")
    assert "Checked on this page: 1 claims" in out and "sixteen" in out and out.rstrip().endswith("end")


def test_an_experiment_shown_on_several_pages_lists_its_claims_on_its_first_page_only():
    """Would catch chapter 1's 60 adamw-bytes claims listed again on chapter 4 (whose whole page must stay under
    9,000 words), or a page that stops counting the claims its build ran."""
    home, other = Result("shared"), Result("own")
    home.claim("bytes per parameter", 16, 16)
    home.claim("share", 0.75, 0.75)
    other.claim("own claim", 1, 1)
    page = Page("practice/04-chapter.md", homes={"shared": "01-first.md", "own": "practice/04-chapter.md"})
    for r in (home, other):
        page.results[r.name], page.stored[r.name] = r, []
    out = page.render("text\n{{ claims }}\n")
    assert '??? success "Checked on this page: 3 claims' in out
    assert "- ✅ `shared`: 2 claims, all passed in this page's build; listed on [01-first](../01-first.md)" in out
    assert "bytes per parameter" not in out and '??? success "`own`: 1 claim"' in out and "own claim" in out


def test_claims_box_is_collapsed_grouped_by_experiment_and_folds_datasheet_relations_once():
    """Issue 30 item 2: would catch an open claims box, claims of two experiments in one flat list, or the same
    gpus.toml relation listed once per experiment that repeats it (chapter 7 showed 285 claims, many of them the
    same H100 datasheet checks)."""
    page = Page("demo.md")
    for name in ("alpha", "beta"):
        r = Result(name)
        r.claim("H100-SXM: tf32 dense peak = bf16 dense peak / 2", 494.7e12, 494.7e12, unit="FLOP/s")
        r.claim(f"7B: {name} bytes", 1, 1)
        r.claim(f"7B: {name} steps", 2, 2)
        r.claim(f"{name} alone", 3, 3)
        r.claim(f"{name} estimator (v0.14: current): agrees", 4, 4)  # ": " in brackets: no family
        r.claim(f"{name} estimator (v0.14: old): agrees", 5, 5)
        page.results[name], page.stored[name] = r, []
    out = page.render("text\n{{ claims }}\n")
    assert '??? success "Checked on this page: 11 claims' in out  # 5 own each + the datasheet relation once
    assert '    ??? success "`alpha`: 5 claims"' in out and '    ??? success "`beta`: 5 claims"' in out
    assert out.count("tf32 dense peak") == 1
    assert '    ??? note "Data-file consistency: 1 relations the datasheet figures of H100-SXM' in out
    alpha = out.split("`alpha`")[1].split("`beta`")[0]
    assert (
        "- **7B**\n" in alpha
        and "    - ✅ **alpha bytes**" in alpha
        and "    - ✅ **alpha steps**" in alpha
        and "- ✅ **alpha alone**" in alpha
    )


def test_provenance_once_per_section_and_once_per_page_for_one_machine():
    """Issue 30 item 2: would catch "measured on AMD EPYC ..., torch ..., code ..., date" after every table and
    figure. One machine: named once on the page; a computed table: stamped once per section."""
    r = Result("exp", kind="measured", provenance={"hardware": "CPU X", "torch": "2.13", "code_version": "abc"})
    for name in ("t1", "t2", "t3"):
        r.table(name, ["a"], [[1]], caption=name)
    r.table("c1", ["a"], [[2]], kind="computed")
    r.table("c2", ["a"], [[3]], kind="computed")
    text = "# P\n\n{{ table exp.t1 }}\n{{ table exp.c1 }}\n{{ table exp.c2 }}\n## Two\n{{ table exp.t2 }}\n"
    text += "{{ table exp.c2 }}\n{{ table exp.t3 }}\n"
    body = _page_with(r).render(text).split("Checked on this page")[0]
    assert body.count("measured on CPU X, torch 2.13; every measurement on this page") == 1
    assert body.count("computed; code abc") == 2  # once in each section
    assert "\x03" not in body and "\x04" not in body


def test_a_heading_over_nothing_stored_is_dropped():
    """Issue 30 item 4: would catch the empty "### Measured on a GPU" heading left when no GPU result exists."""
    page = Page("demo.md")
    page.results["a"], page.stored["a"] = Result("a"), []
    out = page.render("# P\n\n## Lesson\n\ntext\n\n### Measured on a GPU\n\n{{ stored a }}\n\n## Next\n\nmore\n")
    assert "Measured on a GPU" not in out and "## Lesson" in out and "## Next" in out and "\x05" not in out


def _mini_site(tmp_path, experiment_body: str, page_text: str):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(page_text)
    body = textwrap.indent(textwrap.dedent(experiment_body), "    ")
    (tmp_path / "gen.py").write_text(
        "from distlab.core.experiments import experiment\n"
        "from distlab.core.results import Result\n"
        "from distlab.core.site import build_pages\n\n"
        '@experiment("mini-demo", "a tiny experiment for the build tests", kind="computed")\n'
        "def mini(device):\n"
        '    r = Result("mini-demo")\n'
        '    r.add("shown", 1)\n'
        f"{body}\n"
        "    return r\n\n"
        "build_pages()\n"
    )
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: mini\nnav:\n  - page.md\nplugins:\n  - gen-files:\n      scripts:\n        - gen.py\n"
    )
    env = os.environ | {"DISTLAB_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_broken_claim_fails_the_build_with_page_claim_values_and_tolerance(tmp_path):
    proc = _mini_site(
        tmp_path, 'r.claim("bytes per param", 17, 16, rel_tol=0.01, unit="B/param")', "# Page\n{{ mini-demo.shown }}\n"
    )
    assert proc.returncode != 0
    err = proc.stdout + proc.stderr
    assert "page page.md" in err and "bytes per param" in err
    assert "17 B/param" in err and "16 B/param" in err and "0.01 relative" in err
    assert "fresh run" in err and "not cached" in err and "distlab run mini-demo" in err


def test_a_build_after_a_failed_claim_measures_again(tmp_path):
    """One forced failure (the first run's claim fails, as noise would make it), then two builds in a row
    that work: would catch a failed result saved in the cache, which made every later build fail in one
    second with the same numbers."""
    marker = tmp_path / "runs"
    body = (
        f'import pathlib\np = pathlib.Path({str(marker)!r})\np.write_text(p.read_text() + "x" if p.exists() '
        f'else "x")\nr.claim("second run onwards", len(p.read_text()) > 1, True)'
    )
    first = _mini_site(tmp_path, body, "# Page\n{{ mini-demo.shown }}\n")
    assert first.returncode != 0 and "second run onwards" in first.stderr
    for _ in range(2):
        again = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=os.environ | {"DISTLAB_CACHE": str(tmp_path / "cache")},
        )
        assert again.returncode == 0, again.stderr[-2000:]
    assert marker.read_text() == "xx", "the third build must come from the cache of the second"


def test_unknown_placeholder_fails_the_build(tmp_path):
    proc = _mini_site(tmp_path, 'r.add("x", 1)', "# Page\n{{ mini-demo.y }}\n")
    assert proc.returncode != 0
    assert "page.md" in proc.stderr and "mini-demo.y" in proc.stderr


def test_passing_mini_site_builds(tmp_path):
    body = 'r.add("x", 42, "B")\nr.claim("x is 42", 42, 42)'
    proc = _mini_site(tmp_path, body, "# Page\nx = {{ mini-demo.x }}\n")
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "site" / "page" / "index.html").read_text()
    assert "x = 42 B" in html and "x is 42" in html


def test_real_site_builds_strict_and_has_no_raw_placeholders(built_site):
    """Every page of the real site: strict build, every placeholder filled."""
    pages = list(built_site.rglob("index.html"))
    assert len(pages) >= 20
    for page in pages:
        text = page.read_text()
        assert "{{" not in text.split("<article", 1)[-1].split("</article>", 1)[0], page
    chapter = (built_site / "01-where-the-bytes-go" / "index.html").read_text()
    assert "Checked on this page" in chapter and "measured on" in chapter


def test_a_page_runs_exactly_the_experiments_its_placeholders_name():
    """The placeholders are the only list of what a page needs: facts and the claims box name none, tables,
    figures and stored results name theirs, in first-appearance order, each once."""
    from distlab.core.site import experiments_named

    text = (
        "{{ fact gpus.H100-SXM.hbm_gb }} {{ b.x | GB }} {{ table a.t }} {{ claims }} {{ figure c.f }} "
        "{{ stored d }} {{ a.y }}"
    )
    assert experiments_named(text) == ["b", "a", "c", "d"]
    assert experiments_named("{{ stored d | published e.t }} {{ e.x }}") == ["d", "e"]


def test_the_takeaway_box_moves_above_the_notation_table():
    """Issue 30 item 1: would catch a chapter whose results to remember sit below a long notation table, off the
    reader's first screen; the table and the box stay whole."""
    text = (
        "# 9. Ch\n\nWhat you will be able to do.\n\n| Symbol | Meaning |\n|---|---|\n| $B$ | bandwidth |\n\n"
        '!!! abstract "Takeaway"\n    First line.\n\n    Second paragraph.\n\n## One\n\ntext\n'
    )
    out = _page_with(Result("exp")).render(text)
    assert out.index("!!! abstract") < out.index("| Symbol") < out.index("## One")
    assert "    First line.\n\n    Second paragraph.\n\n| Symbol | Meaning |\n|---|---|\n| $B$ | bandwidth |" in out
    already = '# T\n\n!!! abstract "Takeaway"\n    x\n\n| a |\n|---|\n| 1 |\n\n## S\n'
    assert _page_with(Result("exp")).render(already).startswith(already.rstrip("\n"))
