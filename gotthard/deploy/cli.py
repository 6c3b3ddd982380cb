"""``gotthard deploy render --target kubernetes|kustomize|systemd|prometheus|thanos|local|spiffe
--out DIR [--site SITE|all]``.

``--site`` renders the Kubernetes manifests of another site of the site model (or of every
site, one directory each) from the one site file; ``--target kustomize`` writes a base and
an overlay per site. Exit status: 0 written; 2 a bad target or site, an unwritable
directory or a site model that cannot be rendered (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gotthard import config as configuration
from gotthard.config import Config
from gotthard.deploy.manifest import RenderError, write

TARGETS = ("kubernetes", "kustomize", "systemd", "prometheus", "thanos", "local", "spiffe")
#: The targets ``--site`` applies to (the others render every site, or the host's own).
PER_SITE = ("kubernetes", "kustomize")
#: The targets whose rules carry runbook and dashboard links (``local`` is this machine's
#: sandbox, where the placeholders are expected).
LINKED = ("kubernetes", "kustomize", "prometheus", "thanos")


def add_cli(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "deploy",
        help="deployment: Kubernetes manifests, systemd units, Prometheus and Alertmanager "
        "configuration, Thanos, every site on this machine, SPIFFE identities",
    )
    sub = parser.add_subparsers(dest="deploy_command", metavar="ACTION")
    sub.required = True
    render = sub.add_parser(
        "render",
        help="write the deployment of every role for one target",
        description="Render the deployment of every role from the site model and [deploy].",
    )
    render.add_argument("--target", required=True, metavar="|".join(TARGETS))
    render.add_argument("--out", required=True, metavar="DIR", help="directory to write to")
    render.add_argument(
        "--site",
        metavar="SITE|all",
        help="kubernetes: render this site of the site model (all: every site, one directory"
        " each; default: the file's own site); kustomize: the overlays to write (default: all)",
    )
    render.set_defaults(handler=cmd_render)


def _unknown_target(target: str) -> RenderError:
    return RenderError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")


def _site_toml(path: str | None, cfg: Config) -> str:
    """The site file as given (it becomes the pods' ConfigMap), or the names alone."""
    if path:
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise RenderError(f"{path}: cannot read: {err.strerror or err}") from None
    return f'site = "{cfg.site}"\ncluster = "{cfg.cluster}"\n'


def _site_document(path: str | None, cfg: Config) -> dict[str, Any]:
    """The site file as read, or the names alone."""
    if path:
        try:
            return configuration.read_toml(path)
        except configuration.ConfigError as err:
            raise RenderError(str(err)) from None
    return {"site": cfg.site, "cluster": cfg.cluster}


def _kubernetes(cfg: Config, text: str, site: str | None) -> dict[str, str]:
    """``--target kubernetes``: the file's own site, another, or every site in a directory
    of its name."""
    from gotthard.deploy import kubernetes, sitefile, waivers

    settings = cfg.deploy.kubernetes
    files: dict[str, str] = {}
    for name in sitefile.sites_of(cfg, site):
        site_cfg, site_text = sitefile.for_site(cfg, text, name)
        prefix = f"{name}/" if site == sitefile.ALL else ""
        found = {**kubernetes.render(site_cfg, settings, site_text), **waivers.render(settings)}
        files.update({prefix + path: content for path, content in found.items()})
    return files


def render_files(
    target: str, cfg: Config, site_file: str | None, out: Path, site: str | None = None
) -> dict[str, str]:
    """Relative path -> text of what *target* consists of, to be written below *out*;
    *cfg* is what *site_file* (None: no file, the defaults) loads to; *site* is
    ``--site``."""
    deploy = cfg.deploy
    if site is not None and target not in PER_SITE:
        raise RenderError(f"--site: applies to --target {' and '.join(PER_SITE)} only")
    if target == "kubernetes":
        return _kubernetes(cfg, _site_toml(site_file, cfg), site)
    if target == "kustomize":
        from gotthard.deploy import kustomize, sitefile

        sites = sitefile.sites_of(cfg, site or sitefile.ALL)
        return kustomize.render(cfg, _site_toml(site_file, cfg), sites)
    if target == "systemd":
        from gotthard.deploy import systemd

        return systemd.render(cfg, deploy.systemd, deploy.kubernetes)
    if target == "prometheus":
        from gotthard.deploy import prometheus

        return prometheus.render(cfg)
    if target == "thanos":
        from gotthard.deploy import thanos

        return thanos.render(cfg, deploy.thanos)
    if target == "local":
        from gotthard.deploy import local

        return local.render(cfg, _site_document(site_file, cfg), out.absolute())
    if target == "spiffe":
        from gotthard.deploy import identities

        return identities.render(cfg)
    raise _unknown_target(target)


def cmd_render(args: argparse.Namespace, cfg: Config) -> int:
    try:
        if args.target not in TARGETS:  # checked before anything is read or written
            raise _unknown_target(args.target)
        out = Path(args.out)
        files = render_files(args.target, cfg, configuration.path_of(args), out, args.site)
        written = write(out, files)
    except RenderError as err:
        print(f"gotthard deploy: {err}", file=sys.stderr)
        return 2
    for key in cfg.deploy.kubernetes.placeholders() if args.target in LINKED else ():
        print(
            f"gotthard deploy: warning: [deploy.kubernetes] {key} is left at the placeholder"
            f" {getattr(cfg.deploy.kubernetes, key)}: every alert links there; set the site's",
            file=sys.stderr,
        )
    print(f"wrote {len(written)} files to {args.out}")
    return 0
