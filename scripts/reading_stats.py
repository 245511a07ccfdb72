"""Words and claims per page of a built site (issue 30): how long a chapter's lesson is to read.

    python scripts/reading_stats.py site/        # after `mkdocs build -d site/`

For every numbered chapter and appendix page it prints the words a reader meets with every collapsible block
closed (the lesson), the words of the whole page (every block opened) and the claims the page checks. The
limits are issue 30's: the lesson at most LESSON_WORDS, the page at most PAGE_WORDS.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

LESSON_WORDS = 5_000
PAGE_WORDS = 9_000
CHAPTER = re.compile(r"^(\d\d-|appendix-)")
_WORD = re.compile(r"\w+")
_SKIP = {"script", "style"}


class _Words(HTMLParser):
    """Words inside <article>, split into those inside a <details> block (folded) and those outside."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lesson: list[str] = []
        self.folded: list[str] = []
        self.in_article = 0
        self.details = 0
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag == "article":
            self.in_article += 1
        elif tag == "details":
            self.details += 1
        elif tag in _SKIP:
            self.skip += 1

    def handle_endtag(self, tag):
        if tag == "article":
            self.in_article -= 1
        elif tag == "details":
            self.details -= 1
        elif tag in _SKIP:
            self.skip -= 1

    def handle_data(self, data):
        if self.in_article and not self.skip:
            (self.folded if self.details else self.lesson).extend(_WORD.findall(data))


def page_stats(html: str) -> dict[str, int]:
    """lesson: words outside collapsible blocks; page: all words of the article; claims: the claims box's count."""
    parser = _Words()
    parser.feed(html)
    claims = re.search(r"Checked on this page: (\d+) claims", html)
    return {
        "lesson": len(parser.lesson),
        "page": len(parser.lesson) + len(parser.folded),
        "claims": int(claims.group(1)) if claims else 0,
    }


def site_stats(site: Path) -> dict[str, dict[str, int]]:
    """page folder -> stats, for every numbered chapter and appendix page of a built site."""
    out = {}
    for folder in sorted(p for p in site.iterdir() if p.is_dir() and CHAPTER.match(p.name)):
        html = (folder / "index.html").read_text(encoding="utf-8")
        if "Not built: DISTLAB_ONLY" in html:
            continue
        out[folder.name] = page_stats(html)
    return out


def over_limits(stats: dict[str, dict[str, int]]) -> list[str]:
    """The pages whose lesson or whole page is longer than issue 30's limits, each with its numbers."""
    return [
        f"{name}: lesson {s['lesson']:,} words (limit {LESSON_WORDS:,}), page {s['page']:,} (limit {PAGE_WORDS:,})"
        for name, s in stats.items()
        if s["lesson"] > LESSON_WORDS or s["page"] > PAGE_WORDS
    ]


def report(stats: dict[str, dict[str, int]]) -> str:
    lines = [f"{'page':<34} {'lesson':>8} {'page':>8} {'claims':>7}"]
    for name, s in stats.items():
        lines.append(f"{name:<34} {s['lesson']:>8,} {s['page']:>8,} {s['claims']:>7,}")
    total = {k: sum(s[k] for s in stats.values()) for k in ("lesson", "page", "claims")}
    lines.append(f"{'total':<34} {total['lesson']:>8,} {total['page']:>8,} {total['claims']:>7,}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: python scripts/reading_stats.py BUILT_SITE_DIR", file=sys.stderr)
        sys.exit(2)
    print(report(site_stats(Path(sys.argv[1]))))
