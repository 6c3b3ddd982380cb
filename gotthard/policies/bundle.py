"""``gotthard policy bundle``: an OPA bundle that enforces the policies at admission.

Layout (``tar.gz``, as ``opa build`` writes and ``opa run --bundle`` / the bundle service of
an OPA server with kube-mgmt loads it):

* ``.manifest``: ``{"revision": ..., "roots": ["gotthard", "system"]}``;
* ``gotthard/*.rego``: the shipped policies and constraints (queried as by ``--engine opa``),
  ``review.rego`` and ``webhook.rego`` (the AdmissionReview decision) and
  ``webhook_pod*.rego``, the pod policy's files re-targeted at the object under review;
* ``system/main.rego``: ``data.system.main``, OPA's default decision (``POST /``), is
  ``data.gotthard.webhook.main``, the AdmissionReview response;
* ``gotthard/data.json``: ``data.gotthard`` (shipped site values, ``--data`` and the
  ``[policies]`` constraints, as ``policy eval`` uses them).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gotthard.policies import adapt
from gotthard.policies.engine import POLICIES, PolicyError, ready_data, rego_dir, rego_modules

ROOTS = ("gotthard", "system")
#: The decision an admission webhook queries (and OPA's default decision through system.main).
WEBHOOK_DECISION = "gotthard/webhook/main"
#: Adapter modules shipped beside the policies, used only in the bundle and by Gatekeeper.
REVIEW_MODULE, WEBHOOK_MODULE = "review.rego", "webhook.rego"
SYSTEM_MAIN = """# OPA's default decision (POST /): the bundle webhook's AdmissionReview response.
package system

import rego.v1

main := data.gotthard.webhook.main
"""


def adapter_source(name: str) -> str:
    return rego_dir().joinpath(name).read_text(encoding="utf-8")


def webhook_pod_modules() -> dict[str, str]:
    """The pod policy's files re-targeted at the object under review
    (data.gotthard.review.pod as their input), by bundle file name."""
    modules = rego_modules()
    return {
        f"webhook_{name}": adapt.rewrite(
            modules[name], "gotthard.webhook.pod", {"input": "data.gotthard.review.pod"}
        )
        for name in POLICIES["pod"].modules
    }


def bundle_files(data: Mapping[str, Any], revision: str | None = None) -> dict[str, bytes]:
    """Path in the bundle -> content."""
    files: dict[str, bytes] = {}
    for name, src in rego_modules().items():
        files[f"gotthard/{name}"] = src.encode()
    for name in (REVIEW_MODULE, WEBHOOK_MODULE):
        files[f"gotthard/{name}"] = adapter_source(name).encode()
    for name, src in webhook_pod_modules().items():
        files[f"gotthard/{name}"] = src.encode()
    files["system/main.rego"] = SYSTEM_MAIN.encode()
    files["gotthard/data.json"] = json.dumps(ready_data(data), indent=1, sort_keys=True).encode()
    if revision is None:
        digest = hashlib.sha256()
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + files[path] + b"\0")
        revision = f"gotthard-{digest.hexdigest()[:16]}"
    manifest = {"revision": revision, "roots": list(ROOTS)}
    return {".manifest": json.dumps(manifest, indent=1).encode(), **files}


def write_bundle(path: str | Path, data: Mapping[str, Any], revision: str | None = None) -> str:
    """Write the bundle as a reproducible tar.gz; returns its revision."""
    files = bundle_files(data, revision)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), 0o644, 0
            tar.addfile(info, io.BytesIO(content))
    try:
        # gzip with mtime 0: the same content gives the same bytes
        Path(path).write_bytes(gzip.compress(buffer.getvalue(), mtime=0))
    except OSError as err:
        raise PolicyError(f"--out {path}: cannot write: {err}") from err
    return str(json.loads(files[".manifest"])["revision"])
