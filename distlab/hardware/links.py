"""The links collectives run on, from distlab/data/interconnect.toml: per-direction bandwidth (from whichever convention
its source quotes) and NCCL's per-step latency for its transport. The one place a datasheet's figure becomes B."""

from __future__ import annotations

from dataclasses import dataclass

from distlab.core.facts import entries, fact


# ---------------------------------------------------------------- links from interconnect.toml
@dataclass(frozen=True, kw_only=True)
class Link:
    """One rank's link, as the cost model needs it."""

    name: str
    """Entry name in distlab/data/interconnect.toml."""
    bandwidth_bytes_per_s: float
    """Bytes per second in each direction (what the model's B is)."""
    alpha_s: float
    """Per-step latency: NCCL's tuner's hwLat for this transport and protocol."""
    transport: str
    """nvlink, pci or net (NCCL's three hardware classes)."""
    protocol: str = "ll"
    """The NCCL protocol whose latency alpha_s is: ll (small messages), ll128 or simple (large)."""

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_per_s > 0 or not self.alpha_s >= 0:
            raise ValueError(f"link {self.name}: bandwidth must be > 0 and alpha >= 0")

    @property
    def bidirectional_bytes_per_s(self) -> float:
        return 2 * self.bandwidth_bytes_per_s


def links() -> list[str]:
    """Names of every entry of interconnect.toml that is a link (it names an NCCL transport)."""
    return [k for k, v in entries("interconnect").items() if "nccl_transport" in v]


def per_direction_bytes_per_s(name: str) -> float:
    """A link's bandwidth per direction in bytes/s, from whichever convention its source uses."""
    row = entries("interconnect").get(name)
    if row is None or "nccl_transport" not in row:
        raise ValueError(f"unknown link {name!r}; known: {', '.join(links())}")
    if "gtransfers_per_s_per_lane" in row:  # PCIe: transfers/s/lane x lanes x encoding efficiency, bits -> bytes
        return row["gtransfers_per_s_per_lane"] * 1e9 * row["lanes"] * row["payload_bits"] / row["line_bits"] / 8
    if "gbits_per_s_per_direction" in row:  # network ports: quoted per direction in bits
        return row["gbits_per_s_per_direction"] * 1e9 / 8
    if "bidirectional_gbytes_per_s_per_link" in row:  # Infinity Fabric: quoted per link, both directions summed
        return row["links"] * row["bidirectional_gbytes_per_s_per_link"] * 1e9 / 2
    return row["bidirectional_gbytes_per_s"] * 1e9 / 2  # NVLink: quoted as both directions summed


def link(name: str, protocol: str = "ll") -> Link:
    """The link `name` of interconnect.toml with its per-direction bandwidth and NCCL's step latency."""
    if protocol not in ("ll", "ll128", "simple"):
        raise ValueError(f"protocol must be ll, ll128 or simple, not {protocol!r}")
    bandwidth = per_direction_bytes_per_s(name)
    transport = fact(f"interconnect.{name}.nccl_transport").text()
    alpha = fact(f"interconnect.nccl-latency-{transport}.ring_{protocol}_us").number() * 1e-6
    return Link(name=name, bandwidth_bytes_per_s=bandwidth, alpha_s=alpha, transport=transport, protocol=protocol)


def _as_link(x: str | Link) -> Link:
    return x if isinstance(x, Link) else link(x)
