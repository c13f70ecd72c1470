"""kuberay-syncer: the in-cluster daemon that does what a static file cannot."""
