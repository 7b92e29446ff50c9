"""pykubevirt's own container images (`make images`): built from a debootstrap Debian 12 root with umoci, no daemon."""
