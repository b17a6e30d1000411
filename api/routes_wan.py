"""WAN endpoints (sites, links, utilization) for the inspector: filled in with WAN-aware sharing (issue 6)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["wan"])
