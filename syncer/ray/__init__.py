"""Ray plumbing: the only code that talks to a Ray head.

`dashboard` (the HTTP client, stdlib urllib only), `types` (the reply shapes), `pool`
(one client per URL, the shared request budget, shared job lists). No Kubernetes here.
"""
