"""KubeVirt's cluster-wide configuration: the KubeVirt CR's spec.configuration and its feature gates."""
