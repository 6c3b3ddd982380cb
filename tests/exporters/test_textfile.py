"""The ``textfile`` collector, on the files ``gotthard policy eval --textfile`` and
``gotthard audit kube-bench --textfile`` really write, through ``gotthard exporter --once``
(output checked by ``promtool check metrics``)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gotthard.exporters.settings import TextfileExporterConfig
from gotthard.exporters.textfile import TextfileCollector
from tests.monitoring.live_sources import write_security_textfiles
from tests.support.cli import gotthard
from tests.support.monitoring import promtool_check_metrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_exporter_serves_the_policy_textfiles(tmp_path: Path) -> None:
    directory = tmp_path / "textfile"
    write_security_textfiles(directory)  # policy eval (a denied pod) and audit kube-bench
    (directory / ".policy.prom.tmp").write_text("half written {")  # skipped: a dotfile
    (directory / "notes.txt").write_text("not a .prom file")

    result = gotthard(
        "exporter", "--once", "--collectors=textfile", f"--textfile.directory={directory}",
        without=("GOTTHARD_CONFIG",),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    promtool_check_metrics(result.stdout)
    got = samples(result.stdout)
    privileged = (("policy", "pod"), ("rule", "POD-PRIV-001"))
    assert got[("gotthard_policy_violations", privileged)] == 1
    assert any(name == "gotthard_kube_bench_checks" for name, _ in got)
    files = {dict(labels)["file"] for name, labels in got if name.startswith("gotthard_textfile_m")}
    assert files == {"policy.prom", "kube-bench.prom"}
    assert got[("gotthard_textfile_scrape_error", ())] == 0
    assert got[("gotthard_collector_up", (("collector", "textfile"),))] == 1


def test_a_bad_file_is_an_error_and_contributes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a-good.prom").write_text('job_done{job="a"} 1\n')
    (tmp_path / "broken.prom").write_text('job_done{job="b" 1\n')
    (tmp_path / "z-again.prom").write_text('job_done{job="a"} 2\n')  # repeats a-good.prom's
    (tmp_path / "reserved.prom").write_text('gotthard_collector_up{collector="x"} 1\n')
    (tmp_path / "mixed.prom").write_text(
        "# TYPE jobs_total counter\njobs_total 3\n# TYPE lat histogram\n"
        'lat_bucket{le="1"} 1\nlat_bucket{le="+Inf"} 2\nlat_sum 1.5\nlat_count 2\n'
        'job_done{job="c", queue="q"} 1\n'
    )
    collector = TextfileCollector(TextfileExporterConfig(directory=str(tmp_path)))
    snapshot = collector.poll()
    assert set(snapshot.errors) == {"broken.prom", "z-again.prom", "reserved.prom"}
    assert "reserved" in snapshot.errors["reserved.prom"]
    assert collector.snapshot_errors(snapshot) == 3
    families = {f.name: f for f in collector.render(snapshot)}
    done = families["job_done"]
    assert done.labels == ("job", "queue")
    assert sorted(done.samples) == [(("a", ""), 1.0), (("c", "q"), 1.0)]
    assert families["jobs_total"].kind == "counter"
    assert families["lat_bucket"].kind == "untyped" and len(families["lat_bucket"].samples) == 2
    assert families["gotthard_textfile_scrape_error"].samples == [((), 1)]


def test_the_collector_needs_a_directory() -> None:
    result = gotthard("exporter", "--once", "--collectors=textfile", without=("GOTTHARD_CONFIG",))
    assert result.returncode == 2
    assert "textfile" in result.stderr and "directory" in result.stderr
    assert "Traceback" not in result.stderr
