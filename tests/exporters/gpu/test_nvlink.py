"""NVLink errors and bytes through the real nvidia-ml-py and the fake libnvidia-ml.so.1:
per GPU by default (summed over its links, never decreasing), per link as well with
``--gpu.nvlink-per-link`` under names of their own."""

from __future__ import annotations

import os
from pathlib import Path

from gotthard.exporters.gpu.links import NVLINK_ERROR_FIELDS
from tests.exporters.gpu.test_gpu_collector import GPU_ONCE, collector, scrape, value
from tests.fakenvml import fakenvml
from tests.support.cli import gotthard
from tests.support.monitoring import promtool_check_metrics

GPUS, LINKS = 2, 18
ERRORS = "gotthard_gpu_nvlink_errors_total"
BYTES = "gotthard_gpu_nvlink_bytes_total"
LINK_ERRORS = "gotthard_gpu_nvlink_link_errors_total"
LINK_BYTES = "gotthard_gpu_nvlink_link_bytes_total"


def count(gpu: int, link: int, kind: str) -> int:
    """The error counter the fixture gives each GPU, link and type: all different."""
    return (gpu + 1) * 10_000 + link * 100 + list(NVLINK_ERROR_FIELDS).index(kind)


def node() -> dict[str, fakenvml.FixtureValue]:
    """Two H200s with 18 NVLinks each: traffic (tx 1000 + link, rx 2000 + link KiB) and
    every error type on every link (:func:`count`)."""
    lines = fakenvml.with_traffic(fakenvml.h200_node(GPUS), links=LINKS)
    for gpu in range(GPUS):
        for link in range(LINKS):
            for kind, field_id in NVLINK_ERROR_FIELDS.items():
                lines[f"{gpu}.field.{field_id}.{link}"] = count(gpu, link, kind)
    return lines


def error_key(gpu: int, link: int, kind: str) -> str:
    return f"{gpu}.field.{NVLINK_ERROR_FIELDS[kind]}.{link}"


def series_of(found: dict, name: str, gpu: str) -> list[dict[str, str]]:
    return [labels for labels, _ in found.get(name, []) if labels["gpu"] == gpu]


def test_by_default_each_gpu_has_one_series_per_error_type_summed_over_its_links(
    fake_nvml: fakenvml.Fixture, tmp_path: Path
) -> None:
    fake_nvml.write(node())
    found = scrape(collector(tmp_path))
    for gpu in range(GPUS):
        labels = series_of(found, ERRORS, str(gpu))
        assert sorted(each["type"] for each in labels) == sorted(NVLINK_ERROR_FIELDS)
        assert all("link" not in each for each in labels)
        for kind in NVLINK_ERROR_FIELDS:
            expected = sum(count(gpu, link, kind) for link in range(LINKS))
            assert value(found, ERRORS, gpu=str(gpu), type=kind) == expected, kind
        assert len(series_of(found, BYTES, str(gpu))) == 2
        tx = sum(1000 + link for link in range(LINKS)) * 1024
        assert value(found, BYTES, gpu=str(gpu), direction="tx") == tx
        assert value(found, BYTES, gpu=str(gpu), direction="rx") == tx + LINKS * 1000 * 1024
    assert LINK_ERRORS not in found and LINK_BYTES not in found


def test_per_link_series_are_opt_in_and_leave_the_per_gpu_sums_as_they_are(
    fake_nvml: fakenvml.Fixture, tmp_path: Path
) -> None:
    fake_nvml.write(node())
    default = scrape(collector(tmp_path))
    found = scrape(collector(tmp_path, nvlink_per_link=True))
    assert found[ERRORS] == default[ERRORS] and found[BYTES] == default[BYTES]
    for gpu in range(GPUS):
        assert len(series_of(found, LINK_ERRORS, str(gpu))) == LINKS * len(NVLINK_ERROR_FIELDS)
        assert len(series_of(found, LINK_BYTES, str(gpu))) == LINKS * 2
    assert value(found, LINK_ERRORS, gpu="1", link="7", type="symbol") == count(1, 7, "symbol")
    assert value(found, LINK_BYTES, gpu="0", link="17", direction="rx") == (2000 + 17) * 1024


def test_the_sum_never_decreases_when_a_link_stops_answering_or_is_reset(
    fake_nvml: fakenvml.Fixture, tmp_path: Path
) -> None:
    fake_nvml.write(node())
    gpu = collector(tmp_path, nvlink_per_link=True)
    start = value(scrape(gpu), ERRORS, gpu="0", type="rcv")
    assert start is not None

    # link 4 does not answer: what it counted stays in the sum; its per-link series goes
    fake_nvml.update({error_key(0, 4, "rcv"): None})
    found = scrape(gpu)
    assert value(found, ERRORS, gpu="0", type="rcv") == start
    assert value(found, LINK_ERRORS, gpu="0", link="4", type="rcv") is None

    # link 5's counters are reset and count 3 errors since; link 0 counts 100 more
    fake_nvml.update({error_key(0, 5, "rcv"): 3, error_key(0, 0, "rcv"): count(0, 0, "rcv") + 100})
    found = scrape(gpu)
    assert value(found, ERRORS, gpu="0", type="rcv") == start + 3 + 100
    assert value(found, LINK_ERRORS, gpu="0", link="5", type="rcv") == 3

    # link 4 answers again, 7 errors on: they are added
    fake_nvml.update({error_key(0, 4, "rcv"): count(0, 4, "rcv") + 7})
    assert value(scrape(gpu), ERRORS, gpu="0", type="rcv") == start + 3 + 100 + 7
    # the other types and GPUs did not move
    assert value(scrape(gpu), ERRORS, gpu="1", type="rcv") == sum(
        count(1, link, "rcv") for link in range(LINKS)
    )
    gpu.close()


def test_the_sums_go_on_across_a_driver_reload_that_resets_every_counter(
    fake_nvml: fakenvml.Fixture, tmp_path: Path
) -> None:
    fake_nvml.write(node())
    gpu = collector(tmp_path)
    gpu.source.rediscover_every = 1
    before = value(scrape(gpu), ERRORS, gpu="1", type="effective")
    assert before is not None
    fake_nvml.update({"1.lost": 1})
    assert value(scrape(gpu), "gotthard_gpu_lost", gpu="1") == 1
    # the driver is reloaded: every link of GPU 1 counts from 0 again, 2 errors each since
    fake_nvml.update({"1.lost": None, **{error_key(1, n, "effective"): 2 for n in range(LINKS)}})
    found = scrape(gpu)
    assert value(found, "gotthard_gpu_lost", gpu="1") == 0
    assert value(found, ERRORS, gpu="1", type="effective") == before + 2 * LINKS
    gpu.close()


def test_the_exporter_flag_turns_the_per_link_series_on(
    fake_nvml_lib: Path, tmp_path: Path
) -> None:
    fixture = tmp_path / "fixture.txt"
    fakenvml.Fixture(fixture).write(node())
    env = fakenvml.subprocess_env(fake_nvml_lib, fixture, base=dict(os.environ))
    plain = gotthard(*GPU_ONCE, env=env)
    per_link = gotthard(*GPU_ONCE, "--gpu.nvlink-per-link", env=env)
    assert plain.returncode == 0 and per_link.returncode == 0, (plain.stderr, per_link.stderr)
    assert plain.stdout.count(f"{ERRORS}{{") == GPUS * len(NVLINK_ERROR_FIELDS)
    assert f"{LINK_ERRORS}{{" not in plain.stdout
    assert per_link.stdout.count(f"{ERRORS}{{") == GPUS * len(NVLINK_ERROR_FIELDS)
    assert per_link.stdout.count(f"{LINK_ERRORS}{{") == GPUS * LINKS * len(NVLINK_ERROR_FIELDS)
    assert per_link.stdout.count(f"{LINK_BYTES}{{") == GPUS * LINKS * 2
    promtool_check_metrics(per_link.stdout)
