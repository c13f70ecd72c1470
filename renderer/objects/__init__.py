"""One module per output family: pure `build_*` functions from models to Kubernetes objects."""
