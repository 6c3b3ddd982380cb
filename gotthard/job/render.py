"""The job report as a table, JSON or Markdown, and the compact summary stored in the
job's AdminComment (docs/job.md documents both JSON forms)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from gotthard.job.report import Report
from gotthard.monitoring.components import job as queries

SUMMARY_SCHEMA = "gotthard.job.summary/v1"
#: Longest AdminComment written; a longer summary drops its per-GPU list first.
MAX_SUMMARY = 1024


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts else "-"


def _human(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ratio":
        return f"{value * 100:.1f}%"
    if unit in ("bytes", "joules", "operations"):
        scaled, prefix = float(value), ""
        for step in ("k", "M", "G", "T", "P"):
            if abs(scaled) < 1000:
                break
            scaled, prefix = scaled / 1000, step
        suffix = {"bytes": "B", "joules": "J", "operations": " ops"}[unit]
        return f"{scaled:.3g} {prefix}{suffix}".replace("  ", " ")
    if unit == "seconds":
        return f"{int(value)}s"
    return f"{value:g}"


_REQUEST_UNITS = {
    "nodes": "count",
    "gpus": "count",
    "cpus": "count",
    "memory_bytes": "bytes",
    "time_limit_seconds": "seconds",
}


def _rows(report: Report) -> list[tuple[str, str, str]]:
    """(section, what, value) rows of the table and the Markdown."""
    rows = [
        ("job", "site/cluster", f"{report.site}/{report.cluster}"),
        ("job", "state", report.state or "-"),
        ("job", "user/account", f"{report.user or '-'}/{report.account or '-'}"),
        ("job", "run", f"{_when(report.start)} .. {_when(report.end)}"),
        ("job", "run_seconds", _human(report.run_seconds, "seconds")),
    ]
    for key, unit in _REQUEST_UNITS.items():
        rows.append(("request", key, _human(report.request.get(key), unit)))
    used_units = {"gpus": "count", "max_rss_bytes": "bytes", "energy_joules": "joules"}
    for measure in queries.MEASURES:
        if measure.per == "gpu":
            used_units.setdefault(measure.key, measure.report_unit)
    for key, value in report.used.items():
        rows.append(("used", key, _human(value, used_units.get(key, ""))))
    for gpu in report.gpus:
        for measure in queries.MEASURES:
            if measure.per == "gpu":
                name = "energy_joules" if measure.key == "power" else measure.key
                value = _human(gpu.values.get(measure.key), measure.report_unit)
                rows.append((f"gpu {gpu.instance}/{gpu.gpu}", name, value))
    for key, value in report.lustre.items():
        unit = "operations" if key.endswith("operations") else "bytes"
        rows.append(("lustre", key, _human(value, unit)))
    for key, value in report.slingshot.items():
        rows.append(("slingshot", key, _human(value, "bytes")))
    return rows


def _findings_lines(report: Report) -> list[str]:
    if not report.findings:
        return ["no findings"]
    return [
        f"{f.kind}: {f.message} [{f.metric}; {f.threshold} = {f.threshold_value:g}]"
        for f in report.findings
    ]


def table(report: Report) -> str:
    rows = [("SECTION", "WHAT", "VALUE"), *_rows(report)]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in rows]
    lines.append("")
    lines.append(f"FINDINGS of job {report.job_id}:")
    lines += [f"  {line}" for line in _findings_lines(report)]
    lines += [f"  note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


def markdown(report: Report) -> str:
    lines = [f"# Job {report.job_id} ({report.site}/{report.cluster})", ""]
    lines += ["| section | what | value |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in _rows(report)]
    lines += ["", "## Findings", ""]
    lines += [f"- {line}" for line in _findings_lines(report)]
    if report.notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


def as_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"


def _short(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def summary(report: Report) -> dict[str, Any]:
    """The compact summary of the report (``gotthard.job.summary/v1``)."""
    used = report.used
    data: dict[str, Any] = {
        "v": SUMMARY_SCHEMA,
        "run_s": round(report.run_seconds or 0),
        "gpus": used.get("gpus", 0),
        "util": _short(used.get("gpu_utilization")),
        "sm": _short(used.get("sm_active")),
        "tensor": _short(used.get("tensor_active")),
        "dram": _short(used.get("dram_active")),
        "gpu_mem_max": used.get("memory_used"),
        "energy_j": _short(used.get("energy_joules"), 0),
        "lustre_rw": [report.lustre.get("read_bytes"), report.lustre.get("write_bytes")],
        "lustre_md": report.lustre.get("metadata_operations"),
        "per_gpu": [
            [f"{g.instance}/{g.gpu}", _short(g.values.get("gpu_utilization"))] for g in report.gpus
        ],
        "findings": [[f.kind, f.threshold, _short(f.value, 4)] for f in report.findings],
    }
    return data


def summary_text(report: Report) -> str:
    """:func:`summary` as compact JSON, at most :data:`MAX_SUMMARY` characters."""
    data = summary(report)
    text = json.dumps(data, separators=(",", ":"))
    if len(text) > MAX_SUMMARY:
        data.pop("per_gpu")
        text = json.dumps(data, separators=(",", ":"))
    return text
