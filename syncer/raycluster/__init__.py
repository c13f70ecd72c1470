"""The RayCluster run-time rules: status and failure recovery, as pure functions.

`status.compute` is KubeRay's `calculateStatus` over a cluster's pods (raycluster.md §7);
`recovery.should_delete` is its `shouldDeletePod`, narrowed to what a syncer beside a GitOps
tool may delete. Not wired into the engine yet: no reconciler, no writes.
"""
