"""``gotthard deploy render --target spiffe``: the SPIFFE identities each role needs.

For the installation's own site (``site``), from ``[spiffe]`` and ``[deploy.kubernetes]``:

* ``cluster-spiffe-ids.yaml``: one SPIRE ``ClusterSPIFFEID`` (spire.spiffe.io/v1alpha1,
  applied by the spire-controller-manager) per Gotthard role that runs in Kubernetes,
  and one each for the Prometheus that scrapes them and the Alertmanager that calls the
  webhook. Every ID is ``spiffe://<trust domain>/ns/<namespace>/sa/<service account>``
  (the template ``{{ .TrustDomain }}`` is the controller's own trust domain). Roles that
  talk to the other sites (the DR daemon: placement reads every site's Prometheus;
  Prometheus: federation) get ``federatesWith`` the other sites' trust domains.
* ``cluster-federated-trust-domains.yaml``: a ``ClusterFederatedTrustDomain`` per other
  site: its trust domain and its SPIRE server's bundle endpoint (``https_spiffe``
  profile, endpoint ID ``spiffe://<trust domain>/spire/server``).
* ``web-config-<role>.yml`` for each role that serves: TLS from spiffe-helper's files in
  ``svid_directory``, client certificates required and verified against the bundle, and
  ``allowed_spiffe_ids``: Prometheus's ID (and Alertmanager's for the webhook).

Errors (a site without a trust domain, another site without a bundle endpoint) are a
:class:`~gotthard.deploy.manifest.RenderError` naming the ``[spiffe]`` key.
"""

from __future__ import annotations

from typing import Any

from gotthard.config import Config
from gotthard.deploy.kubernetes import labels
from gotthard.deploy.manifest import RenderError, dump, dump_all
from gotthard.deploy.roles import DR, NODE_EXPORTER, ROLES, RUNBOOKS, SCRAPED, Role

API_VERSION = "spire.spiffe.io/v1alpha1"
ID_TEMPLATE = (
    "spiffe://{{ .TrustDomain }}/ns/{{ .PodMeta.Namespace }}/sa/{{ .PodSpec.ServiceAccountName }}"
)
#: Roles whose clients reach the other sites.
CROSS_SITE: tuple[Role, ...] = (DR,)
#: The file names spiffe-helper writes by default.
SVID, SVID_KEY, SVID_BUNDLE = "svid.pem", "svid_key.pem", "svid_bundle.pem"


def spiffe_id(trust_domain: str, namespace: str, service_account: str) -> str:
    return f"spiffe://{trust_domain}/ns/{namespace}/sa/{service_account}"


def _trust_domain(cfg: Config, site: str) -> str:
    domain = cfg.spiffe.trust_domains.get(site)
    if not domain:
        raise RenderError(f"[spiffe] trust_domains: no trust domain for site {site!r}")
    return domain


def _other_sites(cfg: Config) -> list[str]:
    return [name for name in cfg.site_model if name != cfg.site]


def _cluster_spiffe_id(
    cfg: Config, name: str, namespace: str, pods: dict[str, str], federates: list[str]
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "spiffeIDTemplate": ID_TEMPLATE,
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": pods},
    }
    if federates:
        spec["federatesWith"] = federates
    if cfg.spiffe.class_name:
        spec["className"] = cfg.spiffe.class_name
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterSPIFFEID",
        "metadata": {"name": name, "labels": labels(cfg)},
        "spec": spec,
    }


def role_namespace(cfg: Config, role: Role) -> str:
    settings = cfg.deploy.kubernetes
    return settings.node_namespace if role is NODE_EXPORTER else settings.namespace


def allowed_clients(cfg: Config, role: Role) -> list[str]:
    """The SPIFFE IDs *role*'s server allows: the site's Prometheus (it scrapes every
    role), and Alertmanager at the webhook."""
    domain = _trust_domain(cfg, cfg.site)
    monitoring = cfg.deploy.kubernetes.prometheus_namespace
    ids = [spiffe_id(domain, monitoring, cfg.spiffe.prometheus_service_account)]
    if role is RUNBOOKS:
        ids.append(spiffe_id(domain, monitoring, cfg.spiffe.alertmanager_service_account))
    return ids


def web_config(cfg: Config, role: Role) -> dict[str, Any]:
    directory = cfg.spiffe.svid_directory.rstrip("/")
    return {
        "tls_server_config": {
            "cert_file": f"{directory}/{SVID}",
            "key_file": f"{directory}/{SVID_KEY}",
            "client_auth_type": "RequireAndVerifyClientCert",
            "client_ca_file": f"{directory}/{SVID_BUNDLE}",
            "allowed_spiffe_ids": allowed_clients(cfg, role),
        }
    }


def render(cfg: Config) -> dict[str, str]:
    """File name -> text (``kubectl apply -f DIR`` for the YAML objects; the web configs
    are the roles' ``--web.config`` / ``web_config``)."""
    settings = cfg.deploy.kubernetes
    others = _other_sites(cfg)
    foreign = [_trust_domain(cfg, site) for site in others]
    _trust_domain(cfg, cfg.site)
    objects = []
    for role in ROLES:
        pods = {"app.kubernetes.io/name": "gotthard", "app.kubernetes.io/component": role.name}
        federates = foreign if role in CROSS_SITE else []
        objects.append(
            _cluster_spiffe_id(cfg, role.full_name, role_namespace(cfg, role), pods, federates)
        )
    monitoring = settings.prometheus_namespace
    objects.append(
        _cluster_spiffe_id(
            cfg, "gotthard-prometheus", monitoring, dict(settings.prometheus_pod_labels), foreign
        )
    )
    objects.append(
        _cluster_spiffe_id(
            cfg, "gotthard-alertmanager", monitoring, dict(settings.alertmanager_pod_labels), []
        )
    )
    files = {"cluster-spiffe-ids.yaml": dump_all(objects)}
    federation = []
    for site, domain in zip(others, foreign, strict=True):
        url = cfg.spiffe.bundle_endpoints.get(site)
        if not url:
            raise RenderError(f"[spiffe] bundle_endpoints: no bundle endpoint for site {site!r}")
        federation.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ClusterFederatedTrustDomain",
                "metadata": {"name": f"gotthard-{site}", "labels": labels(cfg)},
                "spec": {
                    "trustDomain": domain,
                    "bundleEndpointURL": url,
                    "bundleEndpointProfile": {
                        "type": "https_spiffe",
                        "endpointSPIFFEID": f"spiffe://{domain}/spire/server",
                    },
                },
            }
        )
    if federation:
        files["cluster-federated-trust-domains.yaml"] = dump_all(federation)
    for role in SCRAPED:
        files[f"web-config-{role.name}.yml"] = dump(web_config(cfg, role))
    return files
