"""Prometheus metrics under KubeVirt's and kube-apiserver's names, shared by the components that serve /metrics."""
