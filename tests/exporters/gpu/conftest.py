"""Fixtures for GPU collector tests: the FAKE libnvidia-ml.so.1 loaded into the real pynvml.

``fake_nvml_lib`` (session): path of the fake library, built once per session with gcc
against NVIDIA's nvml.h (tests/fakenvml). ``fake_nvml`` (function): a
:class:`~tests.fakenvml.fakenvml.Fixture` (empty file, rewritable between calls) named by
``FAKE_NVML_FIXTURE``, with the fake loaded into pynvml in-process; ``fixture.lib`` gives
the fake's helper counters (init refcount, live GPM samples, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from tests.fakenvml import fakenvml


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake ``libnvidia-ml.so.1`` (built for this session); fails the test if gcc fails."""
    try:
        return fakenvml.build(tmp_path_factory.mktemp("fakenvml"))
    except (fakenvml.BuildError, FileNotFoundError) as exc:
        pytest.fail(f"cannot build the fake NVML library: {exc}", pytrace=False)


@pytest.fixture
def fake_nvml(
    fake_nvml_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[fakenvml.Fixture]:
    """The fake loaded into pynvml in-process, driven by an (initially empty) fixture file.

    Write it with ``fake_nvml.write(fakenvml.h200_node(8))`` / ``update({...})``; the fake
    picks up each rewrite on its next call. Afterwards nvmlShutdown is called until the
    fake's refcount is 0 and pynvml is restored to its previous library.
    """
    fixture = fakenvml.Fixture(tmp_path / "fake_nvml_fixture.txt")
    monkeypatch.setenv(fakenvml.ENV_VAR, str(fixture.path))
    lib = fakenvml.load_into_pynvml(fake_nvml_lib)
    lib.reset()
    fixture.lib = lib
    try:
        yield fixture
    finally:
        for _ in range(lib.init_count()):
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                break
        fakenvml.unload()
        lib.reset()
