"""Errors of the placement."""

from __future__ import annotations

from sana.exceptions import SanaError


class PlacementImpossible(SanaError):
    """No site can run a task: its inputs cannot reach any compute site, or its pinned site is unreachable.

    The message names the task, its input sites and the sites tried.
    """

    code = "PLACEMENT_IMPOSSIBLE"
