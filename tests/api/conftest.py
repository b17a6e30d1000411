from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app


@pytest.fixture
def client(settings_factory) -> Iterator[TestClient]:
    """The full app (dry-run runtime) on the test's Redis prefix."""
    with TestClient(create_app(settings_factory())) as test_client:
        yield test_client
