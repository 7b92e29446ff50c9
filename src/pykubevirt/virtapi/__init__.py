"""virt-api: KubeVirt's subresource API (`subresources.kubevirt.io`), served in-process or as an aggregated API."""
