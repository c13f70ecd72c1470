"""PLACEHOLDER for the project's Ray node provider, `kuberay_gitops_autoscaler.PodProvider`.

The as-actuator branch owns this file and replaces it with the real provider (stdlib only,
Python >= 3.9; /work/notes/autoscaling-contract.md). The renderer only copies the file,
byte for byte, into the `<cluster>-autoscaling` ConfigMap. Until the real file is merged,
importing it fails loudly, so no autoscaler ever runs with this placeholder.
"""

raise ImportError(  # pragma: no cover - the placeholder is never imported
    "kuberay_gitops_autoscaler is a placeholder: this kuberay-gitops build has no node provider"
)
