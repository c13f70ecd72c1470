"""A loopback fake Kubernetes API server for tests, with fault injection and simulators.

`FakeApiServer` (in `server`) serves the real REST protocol on 127.0.0.1 for the official
`kubernetes` client; `fixtures` holds the pytest fixtures and `controllers` the Job
controller and kubelet simulators. Nothing here is shipped or imported by `renderer`/`syncer`.
"""
