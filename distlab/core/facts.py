"""Facts from outside (datasheets, papers), each living once in distlab/data/*.toml with its source.

Layout of a data file:

    [units]                       # field -> unit, shared by every entry
    hbm_gb = "GB"
    [sources.h100-datasheet]      # a source: title (and url / table / page)
    title = "NVIDIA H100 Tensor Core GPU datasheet"
    [H100-SXM]                    # an entry
    source = "h100-datasheet"     # default source of its fields
    hbm_gb = 80
    [H100-SXM.sources]            # per-field override
    sms = "hopper-whitepaper"

Prose refers to a fact as `{{ fact gpus.H100-SXM.hbm_gb }}`; code calls `fact("gpus.H100-SXM.hbm_gb")`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


@dataclass(frozen=True)
class Source:
    key: str
    title: str
    url: str = ""
    detail: str = ""  # table, page or section

    def citation(self) -> str:
        text = self.title + (f", {self.detail}" if self.detail else "")
        return f"[{text}]({self.url})" if self.url else text


@dataclass(frozen=True)
class Fact:
    path: str
    value: object
    unit: str
    source: Source

    def number(self) -> float:
        """The value where a number is needed (an int stays an int): a text or a yes/no in the data file where the
        code expects a figure raises here, naming the fact, not as a TypeError deep inside a formula."""
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise TypeError(f"fact {self.path} is {self.value!r}, not a number")
        return self.value

    def text(self) -> str:
        """The value where a name is needed (a link's transport, an entry it points to)."""
        if not isinstance(self.value, str):
            raise TypeError(f"fact {self.path} is {self.value!r}, not a text")
        return self.value


@functools.cache
def dataset(name: str) -> dict:
    path = DATA_DIR / f"{name}.toml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in DATA_DIR.glob("*.toml")))
        raise KeyError(f"no data file {name!r}; known: {known}")
    with path.open("rb") as f:
        return tomllib.load(f)


def entries(name: str) -> dict[str, dict]:
    """The entries of a data file (everything but its units and sources tables)."""
    return {k: v for k, v in dataset(name).items() if k not in ("units", "sources")}


def source(name: str, key: str) -> Source:
    sources = dataset(name).get("sources", {})
    if key not in sources:
        raise KeyError(f"data file {name!r} names source {key!r} but does not define it")
    s = sources[key]
    return Source(key, s["title"], s.get("url", ""), s.get("detail", ""))


def fact(path: str) -> Fact:
    """`"file.entry.field"` -> the value with its unit and source."""
    try:
        name, entry, field = path.split(".", 2)
    except ValueError:
        raise KeyError(f"fact path {path!r} must be file.entry.field") from None
    data = entries(name)
    if entry not in data:
        raise KeyError(f"unknown entry {entry!r} in {name}.toml; known: {', '.join(sorted(data))}")
    row = data[entry]
    if field not in row or field in ("source", "sources"):
        fields = sorted(k for k in row if k not in ("source", "sources"))
        raise KeyError(f"unknown field {field!r} for {name}.{entry}; known: {', '.join(fields)}")
    key = row.get("sources", {}).get(field, row.get("source"))
    if key is None:
        raise KeyError(f"{path} has no source: every fact must name one")
    unit = dataset(name).get("units", {}).get(field, "")
    return Fact(path, row[field], unit, source(name, key))


def value(path: str):
    return fact(path).value


NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "six": 6, "seven": 7, "eight": 8, "sixteen": 16}
"""Numbers sources spell out ("eight single-port ... NICs")."""


def quoted(path: str, pattern: str) -> float:
    """The number a fact's source prints in its own words: `pattern`'s first group in the quote its source's detail
    holds (digits, or a number the source spells out). The quote is transcribed apart from the typed field, so a
    claim comparing the two fails on a typo in either (a second transcription, not the same number read twice)."""
    found = re.search(pattern, fact(path).source.detail)
    if found is None:
        raise ValueError(f"{path}: its source's detail no longer says {pattern!r}")
    text = found.group(1).replace(",", "")
    return float(NUMBER_WORDS.get(text.lower(), text))
