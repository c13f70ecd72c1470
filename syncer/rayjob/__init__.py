"""The RayJob reconciler: intent, the pure state machine, views, actions, the reconciler.

`machine.decide` is the pure entry point; `views` projects live objects into its inputs;
`actions` carries out its decisions; `reconciler` runs one pass per key for the engine.
"""
