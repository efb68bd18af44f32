"""The agent as its cluster's applier: what the control plane delivers, written into Kubernetes.

`desired` turns held objects into the Kubernetes objects they should be (pure), `client` speaks to
the API server with a kubeconfig's credentials, and `applier` reconciles the two, level-triggered.
"""

from meshplane.agent.kube.applier import KubeApplier
from meshplane.agent.kube.client import KubeClient, KubeRefused, KubeUnavailable

__all__ = ["KubeApplier", "KubeClient", "KubeRefused", "KubeUnavailable"]
