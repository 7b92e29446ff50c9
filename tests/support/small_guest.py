"""The demo guest at the least memory it boots in (several boot at once on a busy host), as JSON for `kubectl apply`.

Since the image carries qemu-guest-agent and dropbear, its initramfs no longer unpacks in 96Mi: the kernel panics
"System is deadlocked on memory" (the node-failure e2e's guests never booted)."""

from __future__ import annotations

import json

from tests.support.cluster import DEMO_IMAGE


def small_guest(name: str, kind: str = "VirtualMachine") -> str:
    """A runStrategy Always VM, or a bare VMI, with no grace period."""
    template = {
        "metadata": {"labels": {"kubevirt.io/domain": name}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "domain": {
                "memory": {"guest": "128Mi"},
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
            },
            "volumes": [{"name": "root", "containerDisk": {"image": DEMO_IMAGE}}],
        },
    }
    if kind == "VirtualMachineInstance":
        metadata = {"name": name, **template["metadata"]}
        body = {"apiVersion": "kubevirt.io/v1", "kind": kind, "metadata": metadata, "spec": template["spec"]}
    else:
        spec = {"runStrategy": "Always", "template": template}
        body = {"apiVersion": "kubevirt.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    return json.dumps(body)
