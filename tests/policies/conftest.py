from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.policies.opa_rest_server import EmbeddedBackedOpaServer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "policies"

#: A Pod every shipped policy allows.
GOOD_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "ok", "namespace": "web"},
    "spec": {
        "securityContext": {"runAsNonRoot": True},
        "containers": [
            {
                "name": "app",
                "image": "registry.gotthard.example.org/web/app:1.0",
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    },
}


@pytest.fixture(scope="session")
def opa_server() -> Iterator[EmbeddedBackedOpaServer]:
    server = EmbeddedBackedOpaServer().start()
    yield server
    server.stop()
