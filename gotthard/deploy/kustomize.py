"""``gotthard deploy render --target kustomize``: one base and an overlay per site.

Every site of the site model is rendered as ``--target kubernetes --site SITE`` would;
the objects are then split:

* ``base/``: every object of every site, without the per-site labels
  (``gotthard.io/site``, ``gotthard.io/cluster``); where the sites' objects differ, the
  base holds the first site's;
* ``overlays/<site>/``: only what differs: the site's labels (``commonLabels``), a JSON
  patch (``patchesJson6902``) per object whose fields differ between sites, stating this
  site's value of each such field (the site file in the ``gotthard-site`` ConfigMaps, the
  pods' checksum of it, the monitors' ``site``/``cluster``, the credentials it mounts), the
  objects only this site has (``resources``), and ``credentials.txt`` (the Secrets to
  create there).

The kustomization fields are those kustomize v2.0.3 (Debian 12's kubectl 1.20) knows, so
that every kubectl with kustomize built in builds the overlays; kustomize v5 warns that
``bases``, ``commonLabels`` and ``patchesJson6902`` are deprecated and builds the same
objects. ``commonLabels`` also adds the labels to label selectors, so the peers of the
NetworkPolicies select by ``matchExpressions``, which it leaves alone (the pods of
Prometheus and Alertmanager do not carry Gotthard's labels). The site file is a patch of
the ConfigMaps, not a ``configMapGenerator``: v2.0.3 ignores a generator's ``namespace``,
and the file is needed in two.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from gotthard.config import Config
from gotthard.deploy import kubernetes, sitefile, waivers
from gotthard.deploy.manifest import dump, dump_all

#: The labels each overlay sets on every object.
SITE_LABELS = ("gotthard.io/site", "gotthard.io/cluster")
BASE = "base"
OVERLAYS = "overlays"
_MISSING = object()

Object = dict[str, Any]
Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


def _key(obj: Object) -> Key:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


def _label_maps(obj: Object) -> Iterator[dict[str, Any]]:
    """The label maps of *obj* that ``commonLabels`` writes: its own, its pod template's."""
    yield obj["metadata"].setdefault("labels", {})
    spec = obj.get("spec", {})
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
    if isinstance(template, dict) and "labels" in template.get("metadata", {}):
        yield template["metadata"]["labels"]


def _peers_by_expression(obj: Object) -> None:
    """A NetworkPolicy's peer pod selectors as ``matchExpressions`` (the same pods):
    ``commonLabels`` would add this site's labels to a ``matchLabels`` peer."""
    if obj["kind"] != "NetworkPolicy":
        return
    spec = obj["spec"]
    for rule in [*spec.get("ingress", []), *spec.get("egress", [])]:
        for peer in [*rule.get("from", []), *rule.get("to", [])]:
            selector = peer.get("podSelector")
            if selector and selector.get("matchLabels"):
                labels = selector.pop("matchLabels")
                expressions = [
                    {"key": key, "operator": "In", "values": [value]}
                    for key, value in labels.items()
                ]
                selector["matchExpressions"] = [*expressions, *selector.get("matchExpressions", [])]


def _neutral(obj: Object) -> Object:
    """*obj* as the base holds it: no per-site labels, peers by expression."""
    for labels in _label_maps(obj):
        for name in SITE_LABELS:
            labels.pop(name, None)
    _peers_by_expression(obj)
    return obj


def _differences(values: Sequence[Any], path: tuple[str | int, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths at which *values* (one per site) differ, as deep as their shapes agree."""
    first = values[0]
    if all(v == first for v in values):
        return []
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return [
            found
            for key in keys
            for found in _differences([v.get(key, _MISSING) for v in values], (*path, key))
        ]
    if all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1:
        return [
            found
            for index in range(len(first))
            for found in _differences([v[index] for v in values], (*path, index))
        ]
    return [path]


def _at(document: Any, path: Sequence[str | int]) -> Any:
    for part in path:
        if isinstance(document, dict):
            document = document.get(part, _MISSING)
        elif isinstance(document, list) and isinstance(part, int) and part < len(document):
            document = document[part]
        else:
            return _MISSING
    return document


def _pointer(path: Sequence[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _operations(base: Object, mine: Object, paths: Sequence[tuple[Any, ...]]) -> list[Object]:
    """JSON patch operations that turn *base* into *mine* at *paths*: this site's value of
    every field that differs between sites, stated even where it equals the base's."""
    ops: list[Object] = []
    for path in paths:
        old, new = _at(base, path), _at(mine, path)
        pointer = _pointer(path)
        if new is _MISSING:
            if old is not _MISSING:
                ops.append({"op": "remove", "path": pointer})
        elif old is _MISSING:
            ops.append({"op": "add", "path": pointer, "value": new})
        else:
            ops.append({"op": "replace", "path": pointer, "value": new})
    return ops


def _target(key: Key) -> dict[str, str]:
    api_version, kind, namespace, name = key
    group, _, version = api_version.rpartition("/")
    target = {"group": group, "version": version, "kind": kind, "name": name}
    if not group:
        del target["group"]
    if namespace:
        target["namespace"] = namespace
    return target


def _file_name(key: Key) -> str:
    _, kind, namespace, name = key
    return "-".join(part for part in (kind.lower(), namespace, name) if part) + ".yaml"


def _parse(files: Mapping[str, str]) -> dict[str, list[Object]]:
    """Manifest file name -> its objects (``*.yaml`` at the top: what ``kubectl apply -f``
    reads)."""
    return {
        name: [doc for doc in yaml.safe_load_all(text) if doc]
        for name, text in files.items()
        if name.endswith(".yaml") and "/" not in name
    }


def render(cfg: Config, site_toml: str, sites: Sequence[str]) -> dict[str, str]:
    """``base/`` and ``overlays/<site>/`` for each of *sites*; the base is computed over
    every site of the model, so that it does not depend on which overlays are written."""
    settings = cfg.deploy.kubernetes
    every = list(cfg.site_model)
    rendered: dict[str, dict[str, list[Object]]] = {}
    listings: dict[str, str] = {}
    clusters: dict[str, str] = {}
    for site in every:
        site_cfg, text = sitefile.for_site(cfg, site_toml, site)
        files = kubernetes.render(site_cfg, settings, text)
        rendered[site] = _parse(files)
        listings[site] = files[kubernetes.CREDENTIALS_FILE]
        clusters[site] = site_cfg.cluster
    # every object of every site, neutral, by key; the file it goes to is the first seen
    by_site: dict[str, dict[Key, Object]] = {}
    file_of: dict[Key, str] = {}
    for site in every:
        by_site[site] = {}
        for name, objects in rendered[site].items():
            for obj in objects:
                key = _key(obj)
                by_site[site][key] = _neutral(obj)
                file_of.setdefault(key, name)
    keys = list(dict.fromkeys(k for site in every for k in by_site[site]))
    common = [k for k in keys if all(k in by_site[s] for s in every)]
    base_files: dict[str, list[Object]] = {}
    patches: dict[str, dict[Key, list[Object]]] = {site: {} for site in every}
    for key in common:
        versions = [by_site[s][key] for s in every]
        base_files.setdefault(file_of[key], []).append(versions[0])
        paths = _differences(versions)
        if paths:
            for site in every:
                patches[site][key] = _operations(versions[0], by_site[site][key], paths)
    comments = kubernetes.file_comments(settings)
    files: dict[str, str] = {
        f"{BASE}/{name}": dump_all(objects, comments.get(name))
        for name, objects in base_files.items()
    }
    files[f"{BASE}/kustomization.yaml"] = dump({"resources": sorted(base_files)})
    for path, text in waivers.render(settings).items():
        files[path] = text
    for site in sites:
        files.update(
            _overlay(
                site,
                clusters[site],
                [k for k in keys if k in by_site[site] and k not in common],
                by_site[site],
                patches[site],
                listings[site],
            )
        )
    return files


def _overlay(
    site: str,
    cluster: str,
    own: Sequence[Key],
    objects: Mapping[Key, Object],
    patches: Mapping[Key, list[Object]],
    listing: str,
) -> dict[str, str]:
    where = f"{OVERLAYS}/{site}"
    kustomization: dict[str, Any] = {
        "bases": [posixpath.relpath(BASE, where)],
        "commonLabels": {SITE_LABELS[0]: site, SITE_LABELS[1]: cluster},
    }
    files: dict[str, str] = {}
    if own:
        kustomization["resources"] = [f"resources/{_file_name(k)}" for k in own]
        for key in own:
            files[f"{where}/resources/{_file_name(key)}"] = dump(objects[key])
    if patches:
        kustomization["patchesJson6902"] = [
            {"target": _target(key), "path": f"patches/{_file_name(key)}"} for key in patches
        ]
        for key, ops in patches.items():
            files[f"{where}/patches/{_file_name(key)}"] = dump(ops)
    files[f"{where}/kustomization.yaml"] = dump(kustomization)
    files[f"{where}/{kubernetes.CREDENTIALS_FILE}"] = listing
    return files
