from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.policies.opa_rest_server import EmbeddedBackedOpaServer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "policies"


@pytest.fixture(scope="session")
def opa_server() -> Iterator[EmbeddedBackedOpaServer]:
    server = EmbeddedBackedOpaServer().start()
    yield server
    server.stop()
