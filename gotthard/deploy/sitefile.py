"""One site file, every site: the site file as the pods of one site get it.

The site file names the site and cluster it runs at (``site``, ``cluster``); every other
key is the same at every site. ``deploy render --site NAME`` renders the deployment of
site NAME from the one file: the two top-level keys are rewritten in the file's own text
(its comments and layout kept) and the result is validated again as the pods will read it.
"""

from __future__ import annotations

import re
from typing import Any

from gotthard import config as configuration
from gotthard.config import Config
from gotthard.deploy.manifest import RenderError, dump_toml

#: ``--site all``.
ALL = "all"
_TABLE = re.compile(r"^\s*\[")


def sites_of(cfg: Config, given: str | None) -> list[str]:
    """The sites ``--site`` names: one, every site of the model (``all``), or none given:
    the file's own."""
    model = cfg.site_model
    if given is None:
        return [cfg.site]
    if given == ALL:
        return list(model)
    if given not in model:
        raise RenderError(f"--site {given}: not a site of the site model ({', '.join(model)})")
    return [given]


def cluster_of(cfg: Config, site: str) -> str:
    """The ``cluster`` the render of *site* sets: ``[deploy.kubernetes] clusters``, else
    the file's own ``cluster`` at its own site, else the site's Kubernetes cluster."""
    given = cfg.deploy.kubernetes.clusters
    model = cfg.site_model
    if site in given:
        cluster = given[site]
        if cluster not in model[site].clusters:
            raise RenderError(
                f"deploy.kubernetes.clusters.{site}: {cluster!r} is not a cluster of site"
                f" {site!r} ({', '.join(model[site].clusters)})"
            )
        return cluster
    if site == cfg.site:
        return cfg.cluster
    kube = model[site].kube_cluster
    if kube is None:
        raise RenderError(
            f"--site {site}: the site has no cluster with a kubernetes table to deploy to;"
            f" set deploy.kubernetes.clusters.{site}"
        )
    return kube


def _rewrite(text: str, key: str, value: str) -> str:
    """*text* with the top-level string *key* set to *value* (added first if absent)."""
    lines = text.splitlines(keepends=True)
    pattern = re.compile(rf"^(\s*{key}\s*=\s*)(\"[^\"]*\"|'[^']*')(.*)$", re.DOTALL)
    for index, line in enumerate(lines):
        if _TABLE.match(line):
            break
        found = pattern.match(line)
        if found:
            lines[index] = f'{found.group(1)}"{value}"{found.group(3)}'
            return "".join(lines)
    return f'{key} = "{value}"\n' + text


def with_site(text: str, site: str, cluster: str) -> str:
    """The site file *text* as the pods of *site* read it, *cluster* their own."""
    new = _rewrite(_rewrite(text, "cluster", cluster), "site", site)
    try:
        before = configuration.parse_toml(text, "the site file")
        after = configuration.parse_toml(new, f"the site file of {site}")
    except configuration.ConfigError as err:
        raise RenderError(str(err)) from None
    expected: dict[str, Any] = {**before, "site": site, "cluster": cluster}
    if after != expected:  # a layout the rewrite does not know: write the data instead
        new = dump_toml(expected)
    return new


def for_site(cfg: Config, text: str, site: str) -> tuple[Config, str]:
    """(the configuration, the site file) of *site*, validated as its pods load it."""
    if site == cfg.site and cluster_of(cfg, site) == cfg.cluster:
        return cfg, text
    new = with_site(text, site, cluster_of(cfg, site))
    source = f"the site file of {site}"
    try:
        return configuration.from_mapping(configuration.parse_toml(new, source), source), new
    except configuration.ConfigError as err:
        raise RenderError(str(err)) from None
