"""The RayService reconciler: intent, observed state, record, routing, the state machine.

`machine.decide` is the pure entry point, built from `state` (the working state of a
pass), `switching` (None and NewCluster) and `upgrade` (incremental, by route weights);
`views` projects live objects into `observed` values; `reconciler` applies decisions.
"""
