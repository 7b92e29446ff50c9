"""Kubernetes storage in the embedded cluster: the PV controller and the local-path provisioner."""
