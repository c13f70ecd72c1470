"""cert-manager objects for mTLS (`tlsOptions.enabled`, gate RayClusterMTLS, §1.5.4).

KubeRay names the CA Secret after the RayCluster UID and adds live Pod IPs to the
leaf certificates; neither exists at render time. The CA Secret gets a content hash
of the cluster's namespace and name instead, and the IP SANs start with 127.0.0.1.
"""

from __future__ import annotations

from renderer import naming
from renderer.manifest import Manifest
from renderer.model.raycluster import RayCluster
from renderer.options import RenderOptions

_API = "cert-manager.io/v1"


def ca_secret_name(cluster: RayCluster) -> str:
    """Deterministic stand-in for `<C>-ca-secret-<UID[:8]>`."""
    return f"{cluster.name}-ca-secret-{naming.content_hash([cluster.namespace, cluster.name], 8)}"


def _object(cluster: RayCluster, kind: str, name: str, component: str, spec: Manifest) -> Manifest:
    return {
        "apiVersion": _API,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {
                naming.APP_NAME: naming.KUBERAY_APP,
                naming.APP_CREATED_BY: naming.KUBERAY_OPERATOR,
                naming.APP_COMPONENT: component,
                naming.RAY_CLUSTER: cluster.name,
                **cluster.source_labels,
            },
        },
        "spec": spec,
    }


def build_pki(cluster: RayCluster, options: RenderOptions) -> list[Manifest]:
    """Self-signed issuer, CA certificate, CA issuer, head and worker certificates."""
    tls = cluster.spec.get("tlsOptions") or {}
    if not options.gate("RayClusterMTLS") or tls.get("enabled") is not True:
        return []
    c = cluster.name
    ca_secret = ca_secret_name(cluster)
    leaf_usages = ["digital signature", "key encipherment", "server auth", "client auth"]
    ca_ref = {"name": f"ray-ca-issuer-{c}", "kind": "Issuer", "group": "cert-manager.io"}
    return [
        _object(
            cluster, "Issuer", f"ray-selfsigned-issuer-{c}", "selfsigned-issuer", {"selfSigned": {}}
        ),
        _object(
            cluster,
            "Certificate",
            f"ray-ca-certificate-{c}",
            "ca-certificate",
            {
                "secretName": ca_secret,
                "isCA": True,
                "commonName": f"ray-ca-{c}",
                "privateKey": {"algorithm": "RSA", "size": 4096},
                "duration": "87600h0m0s",
                "renewBefore": "720h0m0s",
                "usages": ["cert sign", "crl sign"],
                "issuerRef": {
                    "name": f"ray-selfsigned-issuer-{c}",
                    "kind": "Issuer",
                    "group": "cert-manager.io",
                },
            },
        ),
        _object(
            cluster, "Issuer", f"ray-ca-issuer-{c}", "ca-issuer", {"ca": {"secretName": ca_secret}}
        ),
        _object(
            cluster,
            "Certificate",
            f"ray-head-cert-{c}",
            "head-certificate",
            {
                "secretName": f"ray-head-secret-{c}",
                "duration": "2160h0m0s",
                "renewBefore": "360h0m0s",
                "dnsNames": sorted(["localhost", cluster.fqdn(options)]),
                "ipAddresses": ["127.0.0.1"],
                "usages": leaf_usages,
                "issuerRef": ca_ref,
            },
        ),
        _object(
            cluster,
            "Certificate",
            f"ray-worker-cert-{c}",
            "worker-certificate",
            {
                "secretName": f"ray-worker-secret-{c}",
                "duration": "2160h0m0s",
                "renewBefore": "360h0m0s",
                "dnsNames": ["localhost"],
                "ipAddresses": ["127.0.0.1"],
                "usages": list(leaf_usages),
                "issuerRef": dict(ca_ref),
            },
        ),
    ]
