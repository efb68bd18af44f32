"""Rendered intents are accepted by a real kube-apiserver with Istio's CRDs installed (server-side dry
run, strict field validation), so the CRDs' CEL rules are enforced too, not only their schemas."""

from __future__ import annotations

from pathlib import Path

import yaml

from meshplane.client import load_documents
from meshplane.server.render.offline import project_documents
from meshplane_testing.istio_schema import crd_file
from meshplane_testing.kube import KubeAPIServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "intents"
# external-dns' CRD is not among the shared schemas: DNSEndpoint records are checked offline only.
NOT_INSTALLED = {"DNSEndpoint"}


def test_every_rendered_istio_object_passes_a_server_side_dry_run(kube_apiserver: KubeAPIServer) -> None:
    crds = [doc for doc in yaml.safe_load_all(crd_file().read_text()) if doc]
    kube_apiserver.install_crds(crds)
    plurals = {(crd["spec"]["group"], crd["spec"]["names"]["kind"]): crd["spec"]["names"]["plural"] for crd in crds}
    docs = [doc for path in sorted(EXAMPLES.glob("*.yaml")) for doc in load_documents(path.read_text())]

    checked = 0
    refused = []
    with kube_apiserver.client() as client:
        for cluster in ("edge-1", "edge-2", "core-1"):
            for obj in project_documents(docs, cluster):
                if obj["apiVersion"].startswith("meshplane.io/") or obj["kind"] in NOT_INSTALLED:
                    continue
                group, version = obj["apiVersion"].split("/")
                namespace = obj["metadata"]["namespace"]
                kube_apiserver.create_namespace(namespace)
                path = f"/apis/{group}/{version}/namespaces/{namespace}/{plurals[(group, obj['kind'])]}"
                response = client.post(path, params={"dryRun": "All", "fieldValidation": "Strict"}, json=obj)
                checked += 1
                if response.status_code != 201:
                    refused.append(f"{cluster} {obj['kind']} {namespace}/{obj['metadata']['name']}: {response.text}")
    assert not refused, "\n".join(refused)
    assert checked > 20
