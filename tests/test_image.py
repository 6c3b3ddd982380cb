"""The Containerfile's promises, checked without building it (``make image`` builds and
smoke-runs the image; it is opt-in because it takes minutes):

* multi-stage, the final stage holds the virtual environment from the build stage and
  no wheel directory and no pip;
* one image for every role: the entrypoint is ``gotthard``, the command picks the role;
* a fixed non-root numeric user; the OCI labels; a base that is a build argument with a
  local default (no registry is reachable on the development machines);
* no test double: the image installs the product's wheel with the ``all`` extra, which
  pulls in none of the test doubles' libraries, and the build script builds wheels from
  the product's sources only (never testing/) and checks the image for the doubles.
"""

from __future__ import annotations

import re
import subprocess
import tomllib

from tests.support.cli import ROOT

CONTAINERFILE = ROOT / "Containerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = CONTAINERFILE.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def test_multi_stage_and_the_final_stage_holds_only_the_environment() -> None:
    build, final = stages()
    assert build[0] == ("FROM", "${BASE} AS build")
    assert final[0] == ("FROM", "${BASE}")
    copies = [args for word, args in final if word == "COPY"]
    assert copies == ["--from=build /opt/gotthard /opt/gotthard"]
    build_run = " ".join(args for word, args in build if word == "RUN")
    assert "--no-index" in build_run and "pip uninstall --yes pip setuptools" in build_run


def test_one_image_for_every_role_as_a_non_root_user() -> None:
    final = dict(stages()[-1])
    assert final["ENTRYPOINT"] == '["/opt/gotthard/bin/gotthard"]'
    assert final["USER"] == "10001:10001"
    assert "--uid 10001" in final["RUN"]


def test_oci_labels_and_a_local_default_base() -> None:
    label = dict(stages()[-1])["LABEL"]
    keys = set(re.findall(r"org\.opencontainers\.image\.([a-z.]+)=", label))
    assert {"title", "version", "revision", "created", "licenses", "base.name"} <= keys
    assert ("ARG", "BASE=localhost/gotthard-base:bookworm") in instructions()


def test_the_image_installs_no_test_double() -> None:
    build = dict(stages()[0])
    assert build["ARG"] == "EXTRAS=all"
    installs = " ".join(args for word, args in stages()[0] if word == "RUN")
    assert "gotthard-sre" in installs and "testing" not in installs
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    everything = " ".join(project["optional-dependencies"]["all"])
    assert "sandbox" not in everything and "kmock" not in everything
    script = (ROOT / "scripts" / "build-image").read_text(encoding="utf-8")
    copies = [line for line in script.splitlines() if line.startswith("cp -r ")]
    assert copies == ['cp -r gotthard pyproject.toml README.md "$WORK/src/"']
    assert '"gotthard_testing", "kmock"' in script


def test_the_build_script_parses() -> None:
    script = ROOT / "scripts" / "build-image"
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert script.stat().st_mode & 0o111


def test_the_build_writes_an_sbom_and_prints_the_digest_of_each_image() -> None:
    """``make image``: a CycloneDX SBOM of each image's own environment (cyclonedx-py run
    on the image's mounted /opt/gotthard), and ``IMAGE@sha256:...`` on stdout."""
    script = (ROOT / "scripts" / "build-image").read_text(encoding="utf-8")
    assert '"cyclonedx-bom>=4"' in script
    assert 'cyclonedx-py" environment' in script and '"$mnt/opt/gotthard/bin/python"' in script
    assert 'sbom="$WORK/${name/:/-}.cdx.json"' in script
    assert "podman image inspect --format '{{.Digest}}'" in script
    assert 'echo "$image@$digest" | tee -a "$WORK/digests.txt"' in script
    # both images: the default and the -slurm variant the webhook runs
    assert 'IMAGES+=("$IMAGE-slurm")' in script
    assert "slurm-client slurm-wlm-jwt-plugin" in script
