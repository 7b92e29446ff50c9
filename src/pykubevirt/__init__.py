"""pykubevirt: KubeVirt's virtual-machine lifecycle, written in Python."""

__version__ = "0.1.0"
