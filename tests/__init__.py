"""Tests of kuberay-gitops."""
