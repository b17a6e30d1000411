"""Test clients of the app as this machine's callers: a loopback address and a loopback ``Host``.

Starlette's TestClient has no socket: by default it reports the client
``testclient`` and the host ``testserver``, which single-user mode refuses
(api/guard.py) as it refuses any name it cannot tell is this machine. A test
speaking for a local caller says so through TestClient's own arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from sana.auth import token_hash

LOOPBACK_CLIENT = ("127.0.0.1", 50000)
LOOPBACK_URL = "http://127.0.0.1"


def local_client(app: Any, **kwargs: Any) -> TestClient:
    """A TestClient of ``app`` calling from 127.0.0.1 to http://127.0.0.1."""
    return TestClient(app, base_url=LOOPBACK_URL, client=LOOPBACK_CLIENT, **kwargs)


def write_tokens(tmp_path: Path, tokens: Mapping[str, tuple[str, str]], read_topics: tuple[str, ...] = ("urban",)) -> Path:
    """A tokens file of ``tokens`` (name -> (role, token)), each principal reading ``read_topics``."""
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"principals": [{"name": name, "role": role, "token_sha256": token_hash(token),
                                                "read_topics": list(read_topics)}
                                               for name, (role, token) in tokens.items()]}))
    return path


def bearer(tokens: Mapping[str, tuple[str, str]], name: str) -> dict[str, str]:
    """The Authorization header of principal ``name`` of ``tokens``."""
    return {"Authorization": f"Bearer {tokens[name][1]}"}
