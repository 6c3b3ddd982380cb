"""``gotthard deploy render --target kubernetes|systemd|prometheus|thanos|local|spiffe --out DIR``.

Exit status: 0 written; 2 a bad target, an unwritable directory or a site model that
cannot be rendered (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gotthard import config as configuration
from gotthard.config import Config
from gotthard.deploy.manifest import RenderError, write

TARGETS = ("kubernetes", "systemd", "prometheus", "thanos", "local", "spiffe")
#: The targets whose rules carry runbook and dashboard links (``local`` is this machine's
#: sandbox, where the placeholders are expected).
LINKED = ("kubernetes", "prometheus", "thanos")


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


def render_files(target: str, cfg: Config, site_file: str | None, out: Path) -> dict[str, str]:
    """Relative path -> text of what *target* consists of, to be written below *out*;
    *cfg* is what *site_file* (None: no file, the defaults) loads to."""
    deploy = cfg.deploy
    if target == "kubernetes":
        from gotthard.deploy import kubernetes, waivers

        files = kubernetes.render(cfg, deploy.kubernetes, _site_toml(site_file, cfg))
        files.update(waivers.render(deploy.kubernetes))
        return files
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
        files = render_files(args.target, cfg, configuration.path_of(args), out)
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
