from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from gotthard.policies import cli
from tests.policies.opa_rest_server import EmbeddedBackedOpaServer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "policies"


def run_cli(*argv: str) -> int:
    """``gotthard policy|audit ...`` through add_cli/add_audit_cli, in-process."""
    parser = argparse.ArgumentParser(prog="gotthard")
    parser.add_argument("--config")
    sub = parser.add_subparsers(dest="command")
    cli.add_cli(sub)
    cli.add_audit_cli(sub)
    args = parser.parse_args(list(argv))
    return int(args.func(args))


@pytest.fixture(scope="session")
def opa_server() -> Iterator[EmbeddedBackedOpaServer]:
    server = EmbeddedBackedOpaServer().start()
    yield server
    server.stop()
