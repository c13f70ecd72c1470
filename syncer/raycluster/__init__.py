"""The RayCluster at run time: KubeRay's status, failure recovery and Redis GCS FT cleanup.

`status.compute` is KubeRay's `calculateStatus` over a cluster's pods (raycluster.md §7);
`recovery.should_delete` is its `shouldDeletePod`, narrowed to what a syncer beside a GitOps
tool may delete; `reconciler` runs them per cluster in the engine, `anchor` says what owns
the status map, `healing` deletes dead pods and `cleanup` runs the Redis cleanup Job.
"""
