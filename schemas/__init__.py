"""The project's JSON Schemas for the ray.io/v1 kinds, shipped inside the wheel."""
