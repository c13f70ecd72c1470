"""Kubernetes plumbing: the only code that talks to the API server.

`client` (REST, plain dicts, project errors), `transport` (its HTTP connections),
`forwarding` (wrappers), `informer` and `cache` (list+watch caches), `workqueue`, `leader`
(Lease and write guard), `events`, `timestamps`, `meta` (reading object metadata).
It knows no RayJob or RayService.
"""
