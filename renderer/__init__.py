"""kuberay render: compile KubeRay manifests into the plain objects the operator would create."""
