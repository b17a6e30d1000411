"""Sites, links and where streams originate: the WAN configuration (docs/wan.md, "Configuration").

The configuration is a JSON document, read from the file named by
``SANA_WAN_CONFIG`` or put with ``PUT /wan``::

    {
      "sites": [{"name": "virginia"}, {"name": "ohio", "compute": false}],
      "links": [{"from": "ohio", "to": "virginia", "bandwidth_mbps": 100, "latency_ms": 6}],
      "default_link": {"bandwidth_mbps": 20, "latency_ms": 150},
      "sources": {"tweets-us": {"site": "ohio", "rate_mbps": 16}},
      "sinks": {"alerts": "virginia"},
      "selectivity": {"filter": 0.4},
      "default_source_mbps": 1
    }

A link applies in both directions unless ``"directed": true``; a later entry
for the same direction replaces an earlier one. Pairs of sites without a link
use ``default_link`` when given, and cannot exchange data otherwise.
``selectivity`` maps an operator type to its data-rate factor (output Mbps
per input Mbps); :data:`DEFAULT_SELECTIVITY` fills in the rest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wan.exceptions import WanConfigInvalid

SITE_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"

#: Data-rate factor per operator type when the configuration does not say.
DEFAULT_SELECTIVITY: dict[str, float] = {
    "source": 1.0,
    "filter": 0.5,
    "select": 0.8,
    "union": 1.0,
    "join": 1.0,
    "window_aggregate": 0.05,
    "sink": 1.0,
}


# -- the document (pydantic at the edge) --------------------------------------------


class _SiteDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=SITE_PATTERN)
    compute: bool = True


class _LinkDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: str = Field(alias="from", pattern=SITE_PATTERN)
    to: str = Field(pattern=SITE_PATTERN)
    bandwidth_mbps: float = Field(gt=0, allow_inf_nan=False)
    latency_ms: float = Field(ge=0, allow_inf_nan=False)
    directed: bool = False


class _DefaultLinkDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bandwidth_mbps: float = Field(gt=0, allow_inf_nan=False)
    latency_ms: float = Field(ge=0, allow_inf_nan=False)


class _SourceDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    site: str = Field(pattern=SITE_PATTERN)
    rate_mbps: float | None = Field(None, ge=0, allow_inf_nan=False)


class _ReplacementDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    utilization: float = Field(gt=0, le=10, allow_inf_nan=False)
    check_every_s: float = Field(10.0, gt=0, le=86_400, allow_inf_nan=False)


class _WanDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sites: list[_SiteDoc | str] = Field(min_length=1, max_length=1000)
    links: list[_LinkDoc] = Field(default_factory=list, max_length=100_000)
    default_link: _DefaultLinkDoc | None = None
    sources: dict[str, _SourceDoc | str] = Field(default_factory=dict)
    sinks: dict[str, str] = Field(default_factory=dict)
    selectivity: dict[str, float] = Field(default_factory=dict)
    default_source_mbps: float = Field(1.0, ge=0, allow_inf_nan=False)
    replacement: _ReplacementDoc | None = None
    policy: Literal["sana", "net", "max-share"] = "sana"
    hops: Literal["buffered", "backpressure"] = "buffered"


#: The top-level fields of a WAN configuration document (the Helm chart's values schema lists the same).
WAN_DOCUMENT_FIELDS: tuple[str, ...] = tuple(_WanDoc.model_fields)


# -- the model (dataclasses inside) --------------------------------------------------


@dataclass(frozen=True)
class Site:
    """A site; ``compute`` is False where only raw streams originate (no operator may run there)."""

    name: str
    compute: bool = True


@dataclass(frozen=True)
class Link:
    """One direction between two sites: capacity in Mbps, one-way latency in ms."""

    src: str
    dst: str
    bandwidth_mbps: float
    latency_ms: float


@dataclass(frozen=True)
class SourceOrigin:
    """Where a raw stream (a source topic) originates, and its data rate when known."""

    site: str
    rate_mbps: float | None = None


@dataclass(frozen=True)
class WanConfig:
    """A validated WAN configuration. Build it with :func:`parse_wan_config`.

    >>> wan = parse_wan_config({"sites": ["a", "b"], "links": [{"from": "a", "to": "b", "bandwidth_mbps": 10, "latency_ms": 5}]})
    >>> wan.link("b", "a").bandwidth_mbps, wan.link("a", "a") is None, wan.compute_sites
    (10.0, True, ('a', 'b'))
    """

    sites: tuple[Site, ...]
    links: dict[tuple[str, str], Link] = field(hash=False)
    default_link: tuple[float, float] | None = None
    sources: dict[str, SourceOrigin] = field(default_factory=dict, hash=False)
    sinks: dict[str, str] = field(default_factory=dict, hash=False)
    selectivity: dict[str, float] = field(default_factory=dict, hash=False)
    default_source_mbps: float = 1.0
    #: Re-place the queries whose streams cross a link whose measured utilization reaches this, checked every
    #: ``check_every_s`` (None: never).
    replace_above: float | None = None
    check_every_s: float = 10.0
    #: How queries are planned: ``sana`` (the product), or a baseline for comparisons on a real runtime:
    #: ``net`` (no sharing, WAN-aware placement), ``max-share`` (every share, no bandwidth checks).
    policy: str = "sana"
    #: The flow model plans are weighed with: ``buffered`` (the default: queries are linked by Kafka topics, so a
    #: congested crossing slows only what reads it, as Sana's runtime behaves) or ``backpressure`` (the paper's: a
    #: congested crossing holds back its sources and every query reading them; docs/wan.md).
    hops: str = "buffered"

    @property
    def site_names(self) -> tuple[str, ...]:
        return tuple(site.name for site in self.sites)

    @property
    def compute_sites(self) -> tuple[str, ...]:
        """Sites where operators may run, in configuration order."""
        return tuple(site.name for site in self.sites if site.compute)

    def has_site(self, name: str | None) -> bool:
        return name is not None and any(site.name == name for site in self.sites)

    def can_compute(self, name: str) -> bool:
        return any(site.name == name and site.compute for site in self.sites)

    def link(self, src: str, dst: str) -> Link | None:
        """The link ``src -> dst``: configured, else the default link, else None (also for ``src == dst``)."""
        if src == dst:
            return None
        found = self.links.get((src, dst))
        if found is None and self.default_link is not None and self.has_site(src) and self.has_site(dst):
            return Link(src, dst, *self.default_link)
        return found

    def all_links(self) -> list[Link]:
        """Every usable directed link, configured or default, in a stable order."""
        names = self.site_names
        result = []
        for src in names:
            for dst in names:
                link = self.link(src, dst)
                if link is not None:
                    result.append(link)
        return result

    def factor(self, task_type: str) -> float:
        """Output Mbps per input Mbps of an operator type."""
        return self.selectivity.get(task_type, DEFAULT_SELECTIVITY.get(task_type, 1.0))

    def source_origin(self, topic: str) -> SourceOrigin | None:
        return self.sources.get(topic)

    def with_bandwidth(self, src: str, dst: str, bandwidth_mbps: float) -> "WanConfig":
        """A copy where the directed link ``src -> dst`` has another capacity (time-varying bandwidth)."""
        current = self.link(src, dst)
        if current is None:
            raise WanConfigInvalid(f"no link {src} -> {dst} to change", culprit={"link": [src, dst]})
        links = dict(self.links)
        links[(src, dst)] = replace(current, bandwidth_mbps=float(bandwidth_mbps))
        return replace(self, links=links)

    def to_dict(self) -> dict[str, Any]:
        """The canonical document: every link listed once per direction."""
        result: dict[str, Any] = {
            "sites": [{"name": site.name, "compute": site.compute} for site in self.sites],
            "links": [
                {"from": link.src, "to": link.dst, "bandwidth_mbps": link.bandwidth_mbps,
                 "latency_ms": link.latency_ms, "directed": True}
                for link in self.links.values()
            ],
            "sources": {topic: {"site": origin.site, "rate_mbps": origin.rate_mbps} for topic, origin in self.sources.items()},
            "sinks": dict(self.sinks),
            "selectivity": dict(self.selectivity),
            "default_source_mbps": self.default_source_mbps,
        }
        if self.default_link is not None:
            result["default_link"] = {"bandwidth_mbps": self.default_link[0], "latency_ms": self.default_link[1]}
        if self.replace_above is not None:
            result["replacement"] = {"utilization": self.replace_above, "check_every_s": self.check_every_s}
        if self.policy != "sana":
            result["policy"] = self.policy
        if self.hops != "buffered":
            result["hops"] = self.hops
        return result


def parse_wan_config(data: Mapping[str, Any] | str | bytes) -> WanConfig:
    """Validate a WAN configuration document (a mapping or JSON text).

    Raises :class:`WanConfigInvalid` naming the field at fault: unknown keys,
    a non-positive bandwidth, a link or source naming an unknown site, a
    duplicate site, a negative selectivity.

    >>> parse_wan_config({"sites": ["a"], "links": [{"from": "a", "to": "z", "bandwidth_mbps": 1, "latency_ms": 1}]})
    Traceback (most recent call last):
    ...
    wan.exceptions.WanConfigInvalid: links[0].to: unknown site 'z' (sites: a)
    """
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as error:
            raise WanConfigInvalid(f"the WAN configuration is not JSON: {error}") from None
        except RecursionError:
            raise WanConfigInvalid("the WAN configuration nests deeper than a JSON parser can follow") from None
    if not isinstance(data, Mapping):
        raise WanConfigInvalid("the WAN configuration must be a JSON object")
    try:
        doc = _WanDoc.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = _path(first["loc"])
        raise WanConfigInvalid(f"{where}: {first['msg']}", culprit={"field": where}) from None
    sites: list[Site] = []
    for number, item in enumerate(doc.sites):
        site = Site(item) if isinstance(item, str) else Site(item.name, item.compute)
        if isinstance(item, str) and not _matches_site(site.name):
            raise WanConfigInvalid(f"sites[{number}]: bad site name {site.name!r}: use 1-64 of [A-Za-z0-9_.-]",
                                   culprit={"field": f"sites[{number}]"})
        if any(other.name == site.name for other in sites):
            raise WanConfigInvalid(f"sites[{number}]: site {site.name!r} is listed twice", culprit={"field": f"sites[{number}]"})
        sites.append(site)
    names = [site.name for site in sites]

    def known(name: str, where: str) -> str:
        if name not in names:
            raise WanConfigInvalid(f"{where}: unknown site {name!r} (sites: {', '.join(names)})", culprit={"field": where})
        return name

    links: dict[tuple[str, str], Link] = {}
    for number, item in enumerate(doc.links):
        src, dst = known(item.from_, f"links[{number}].from"), known(item.to, f"links[{number}].to")
        if src == dst:
            raise WanConfigInvalid(f"links[{number}]: a link joins two different sites, not {src!r} to itself",
                                   culprit={"field": f"links[{number}]"})
        links[(src, dst)] = Link(src, dst, float(item.bandwidth_mbps), float(item.latency_ms))
        if not item.directed:
            links[(dst, src)] = Link(dst, src, float(item.bandwidth_mbps), float(item.latency_ms))
    sources: dict[str, SourceOrigin] = {}
    for topic, item in doc.sources.items():
        if isinstance(item, str):
            sources[topic] = SourceOrigin(known(item, f"sources.{topic}"))
        else:
            sources[topic] = SourceOrigin(known(item.site, f"sources.{topic}.site"), item.rate_mbps)
    sinks = {topic: known(site, f"sinks.{topic}") for topic, site in doc.sinks.items()}
    for task_type, value in doc.selectivity.items():
        if not (math.isfinite(value) and value >= 0):
            raise WanConfigInvalid(f"selectivity.{task_type}: must be a finite number >= 0, not {value!r}",
                                   culprit={"field": f"selectivity.{task_type}"})
    default = None if doc.default_link is None else (float(doc.default_link.bandwidth_mbps), float(doc.default_link.latency_ms))
    return WanConfig(
        sites=tuple(sites),
        links=links,
        default_link=default,
        sources=sources,
        sinks=sinks,
        selectivity={key: float(value) for key, value in doc.selectivity.items()},
        default_source_mbps=float(doc.default_source_mbps),
        replace_above=None if doc.replacement is None else float(doc.replacement.utilization),
        check_every_s=10.0 if doc.replacement is None else float(doc.replacement.check_every_s),
        policy=doc.policy,
        hops=doc.hops,
    )


def load_wan_config(path: str | Path) -> WanConfig:
    """Read and validate a WAN configuration file (JSON).

    Raises :class:`WanConfigInvalid` naming the file when it cannot be read.
    """
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise WanConfigInvalid(f"cannot read the WAN configuration {str(path)!r}: {error.strerror}",
                               culprit={"file": str(path)}) from None
    try:
        return parse_wan_config(text)
    except WanConfigInvalid as error:
        raise WanConfigInvalid(f"{path}: {error.message}", culprit={"file": str(path), **error.culprit}) from None


def _path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in ("_SiteDoc", "str", "_SourceDoc"):
            continue
        else:
            parts.append(("." if parts else "") + ("from" if item == "from_" else str(item)))
    return "".join(parts) or "(document)"


def _matches_site(name: str) -> bool:
    return re.fullmatch(SITE_PATTERN[1:-1], name) is not None
