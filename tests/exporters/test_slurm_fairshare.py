"""The fair-share tree (``--slurm.fairshare``) against a real slurmdbd: a sandbox with its
own MariaDB and slurmdbd (:mod:`gotthard.sandbox.accounting`), two accounts whose jobs ran,
read by the ``cli`` backend (sshare) and the exporter; slurmrestd 22.05 offers no
``/shares`` (the ``rest`` backend reads it from v0.0.40 on: checked on a recorded
22.05 tree written in the v0.0.40 schema); pyslurm 25.11 binds no fair-share call."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gotthard.exporters.families import render_text
from gotthard.exporters.slurm.render import render
from gotthard.sandbox import Sandbox, accounting
from gotthard.slurm import pyslurm_backend
from gotthard.slurm.cli import CliBackend
from gotthard.slurm.rest import RestBackend
from gotthard.slurm.rest_json import map_shares
from gotthard.slurm.snapshot import PollOptions, Share, SlurmSnapshot
from gotthard.slurm.text import parse_sshare
from tests.exporters.test_slurm_rest import FakeRestd, serve, v40_documents
from tests.support.cli import run_in_process
from tests.support.lifecycle import running

__all__ = ["serve"]  # the in-test slurmrestd fixture, shared with test_slurm_rest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm-22.05-accounting"
FAIRSHARE = PollOptions(probe=False, fairshare=True)

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """A sandbox with slurmdbd, where a job of physics and, 10 s later, one of chemistry
    ran until slurmctld charged both with usage."""
    sandbox = Sandbox.with_free_ports(
        tmp_path_factory.mktemp("accounting"), gpus=0, accounting=True
    )
    with running(sandbox, "the Slurm sandbox with slurmdbd", with_exporter=False,
                 with_prometheus=False):  # fmt: skip
        sandbox.submit("-A", "physics", "-n", "1", "-t", "10", "--wrap", "sleep 300")
        time.sleep(10)  # chemistry starts later: it has used less when both are charged
        sandbox.submit("-A", "chemistry", "-n", "1", "-t", "10", "--wrap", "sleep 300")
        accounting.wait_usage(sandbox, ("physics", "chemistry"))
        sandbox.cancel_all()
        time.sleep(2)  # the jobs' ends are charged; no decay: the tree stays put
        yield sandbox


def sshare_long(sandbox: Sandbox) -> dict[tuple[str, str], dict[str, str]]:
    """``sshare -a -l -P`` (another format than the backend's), by (account, user)."""
    lines = sandbox.run_command(["sshare", "-a", "-l", "-P"]).stdout.splitlines()
    header = lines[0].split("|")
    rows = {}
    for line in lines[1:]:
        row = dict(zip(header, (cell.strip() for cell in line.split("|")), strict=True))
        rows[(row["Account"], row["User"])] = row
    return rows


def by_key(shares: tuple[Share, ...] | None) -> dict[tuple[str, str], Share]:
    assert shares is not None
    return {(share.account, share.user): share for share in shares}


def test_the_cli_backend_reads_what_sshare_shows(site: Sandbox) -> None:
    snapshot = CliBackend(env=site.env, timeout=30).poll(FAIRSHARE)
    shares = by_key(snapshot.shares)
    table = sshare_long(site)
    assert set(shares) == set(table)
    for key, row in table.items():
        assert shares[key].raw_usage == float(row["RawUsage"]), key
        assert shares[key].effective_usage == pytest.approx(float(row["EffectvUsage"]), abs=1e-6)
        factor = float(row["FairShare"]) if key[1] and row["FairShare"] else None
        assert shares[key].fairshare == pytest.approx(factor, abs=1e-6), key
    physics, chemistry = shares[("physics", "")], shares[("chemistry", "")]
    assert physics.raw_usage > chemistry.raw_usage > 0
    assert shares[("root", "")].raw_usage == pytest.approx(
        physics.raw_usage + chemistry.raw_usage, abs=1
    )
    assert physics.effective_usage + chemistry.effective_usage == pytest.approx(1.0, abs=1e-5)
    for user in (("physics", "root"), ("chemistry", "root")):
        assert 0 < shares[user].fairshare <= 1  # type: ignore[operator]
    assert snapshot.errors == 0


def test_the_exporter_exports_the_tree_when_asked(site: Sandbox, tmp_path: Path) -> None:
    """With ``--slurm.fairshare``, or ``fairshare = true`` in the site file (the sandbox
    writes it when it runs slurmdbd); not otherwise."""
    empty = tmp_path / "empty.toml"
    empty.write_text("")

    def once(*flags: str, config: Path | None = None) -> str:
        env = site.env
        if config is not None:
            env["GOTTHARD_CONFIG"] = str(config)
        result = subprocess.run(
            [sys.executable, "-m", "gotthard", "exporter", "--once", "--collectors", "slurm",
             *flags],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    text = once("--slurm.fairshare", config=empty)
    table = sshare_long(site)
    for (account, user), row in table.items():
        labels = f'account="{account}",user="{user}"'
        raw = re.search(
            rf"^gotthard_slurm_account_raw_usage_seconds\{{{labels}\}} (\S+)$", text, re.M
        )
        assert raw is not None and float(raw.group(1)) == float(row["RawUsage"]), labels
        if user:
            factor = re.search(
                rf"^gotthard_slurm_account_fairshare\{{{labels}\}} (\S+)$", text, re.M
            )
            assert factor is not None, labels
            assert float(factor.group(1)) == pytest.approx(float(row["FairShare"]), abs=1e-6)
    assert 'gotthard_slurm_account_fairshare{account="physics",user=""}' not in text
    assert "gotthard_slurm_account" not in once(config=empty)
    assert "gotthard_slurm_account_fairshare{" in once()  # the sandbox's own site file


def test_slurmrestd_22_05_has_no_shares_and_the_rest_backend_says_nothing(site: Sandbox) -> None:
    url, _ = site.start_slurmrestd("unix")
    try:
        backend = RestBackend(url, timeout=30)
        snapshot = backend.poll(FAIRSHARE)
        assert backend.api_version == "v0.0.38"
        assert snapshot.up and snapshot.shares is None and snapshot.errors == 0
        socket_path = url.removeprefix("unix:")
        done = site.run_command(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", socket_path,
             "http://localhost/slurm/v0.0.38/shares"],
            check=False,
        )  # fmt: skip
        if done.returncode == 0:
            assert done.stdout == "404"
    finally:
        site.stop_slurmrestd("unix")


# --- the recorded tree: sshare and the v0.0.40 /shares schema give the same values ---------


def recorded() -> tuple[tuple[Share, ...], tuple[Share, ...]]:
    text, text_errors = parse_sshare((FIXTURES / "sshare.txt").read_text())
    document = json.loads((FIXTURES / "slurmrestd-v0.0.40-shares.json").read_text())
    rest, rest_errors = map_shares(document)
    assert text_errors == rest_errors == 0
    return text, rest


def test_sshare_and_v0_0_40_shares_of_the_same_tree_are_the_same_values() -> None:
    text, rest = recorded()
    assert text == rest
    keys = {(share.account, share.user) for share in text}
    assert {("physics", "root"), ("chemistry", "root"), ("physics", ""), ("root", "")} <= keys


def test_the_three_families_render_from_either_backend() -> None:
    text, rest = recorded()
    rendered = [
        render_text(render(SlurmSnapshot(up=True, shares=shares), FAIRSHARE))
        for shares in (text, rest)
    ]
    assert rendered[0] == rendered[1]
    assert "gotthard_slurm_account_effective_usage_ratio" in rendered[0]


def test_rest_backend_reads_shares_from_v0_0_40(serve: Callable[..., str]) -> None:
    documents = v40_documents()
    documents["shares"] = json.loads((FIXTURES / "slurmrestd-v0.0.40-shares.json").read_text())
    fake = FakeRestd({"v0.0.40": documents})
    backend = RestBackend(serve(fake), token="t", user="u")
    assert backend.poll(FAIRSHARE).shares == recorded()[0]
    assert "/slurm/v0.0.40/shares" in fake.paths()
    fake.requests.clear()
    assert backend.poll(PollOptions(probe=False)).shares is None
    assert "/slurm/v0.0.40/shares" not in fake.paths()


def test_sshare_rows_that_cannot_be_read_are_counted() -> None:
    shares, errors = parse_sshare("physics||12|0.5|\n|root|1|1|0.5\nphysics|root|x|1|0.5\n")
    assert shares == (Share("physics", "", 12.0, 0.5, None),)
    assert errors == 2


def test_pyslurm_has_no_fair_share_call() -> None:
    """pyslurm 25.11 binds no REQUEST_SHARE_INFO: the pyslurm backend exports no tree.
    (The contract test against its sources checks the name is absent there.)"""
    assert pyslurm_backend.SHARES_RPC == "slurm_associations_get_shares"
    assert pyslurm_backend.SHARES_RPC not in pyslurm_backend.ENTRY_POINTS


def test_the_accounting_files_are_private_and_point_at_the_sandbox(site: Sandbox) -> None:
    conf = site.slurm_conf.read_text()
    assert f"AccountingStoragePort={site.port('slurmdbd')}" in conf
    assert f"AccountingStoragePass={site.munge_socket}" in conf
    assert "PriorityType=priority/multifactor" in conf
    dbd = site.directory / "slurmdbd.conf"
    assert dbd.stat().st_mode & 0o777 == 0o600
    assert f"StoragePort={site.port('mariadb')}" in dbd.read_text()
    assert (site.directory / "mariadb.password").stat().st_mode & 0o777 == 0o600
    names = {record.name for record in site.records()}
    assert {"mariadb", "slurmdbd"} <= names


def test_accounting_is_for_the_single_site_sandbox(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_in_process(
        "sandbox", "up", "--accounting", "--sites", "zurich,lugano", "--dir", str(tmp_path / "s")
    )
    assert code == 2
    assert capsys.readouterr().err == "error: --accounting is for the single-site sandbox\n"
    assert not (tmp_path / "s").exists()
