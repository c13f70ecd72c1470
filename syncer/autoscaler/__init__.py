"""The autoscaling actuator: worker Pods to match what Ray's autoscaler desires (DESIGN §3).

`spec` reads the rendered `<cluster>-autoscaling` ConfigMap (trust checks, templates,
min/max), `plan` is the pure decision (seed, create, delete, cap, dead) and `pods` builds
a dynamic worker from its template; `reconciler` runs one pass per cluster in the engine.
"""
