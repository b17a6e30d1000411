from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.api.clients import local_client


@pytest.fixture
def client(settings_factory) -> Iterator[TestClient]:
    """The full app (dry-run runtime) on the test's Redis prefix, called from this machine (single-user mode)."""
    with local_client(create_app(settings_factory())) as test_client:
        yield test_client
