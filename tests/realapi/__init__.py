"""Tests against a real Kubernetes control plane (etcd, kube-apiserver, controller-manager,
scheduler) built by tools/k8s/build; marker `realapi`."""
