"""Runtime endpoints (fragments, metrics) for the inspector: filled in with the Spark runtime (issue 4)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["runtime"])
