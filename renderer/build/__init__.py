"""One module per output family: pure `build_*` functions from parsed manifests to objects."""
