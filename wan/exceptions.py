"""Errors of the WAN model: its configuration and the sites a dataflow names."""

from __future__ import annotations

from sana.exceptions import SanaError


class WanError(SanaError):
    """Root of the errors of the WAN model and the simulator."""

    code = "WAN_ERROR"


class WanConfigInvalid(WanError):
    """A WAN configuration (sites, links, sources) breaks a rule of docs/wan.md.

    Raised with the offending field in ``culprit`` (for example
    ``{"field": "links[2].bandwidth_mbps"}``).
    """

    code = "WAN_CONFIG_INVALID"


class WanSiteUnknown(WanError):
    """A dataflow names a site the WAN configuration does not have, or a source whose site is unknown."""

    code = "WAN_SITE_UNKNOWN"


class WanNotConfigured(WanError):
    """A WAN view was asked for, but no WAN configuration is set (every equivalent task is shared)."""

    code = "WAN_NOT_CONFIGURED"
