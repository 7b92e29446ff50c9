"""VMI networks (what each interface connects to) and the interface status the node agent reports."""

from __future__ import annotations

from pykubevirt.api.schema import Schema, array, boolean, integer, obj, string

POD_NETWORK: Schema = obj(
    {
        "vmIPv6NetworkCIDR": string(
            "IPv6 CIDR of the guest side of a masquerade interface; fd10:0:2::/120 by default."
        ),
        "vmNetworkCIDR": string("IPv4 CIDR of the guest side of a masquerade interface; 10.0.2.0/24 by default."),
    },
    "The pod's own network.",
)

MULTUS_NETWORK: Schema = obj(
    {
        "default": boolean("Use this network as the pod's default network instead of the cluster network."),
        "networkName": string("NetworkAttachmentDefinition name, as <name> or <namespace>/<name>."),
    },
    "A secondary network attached through Multus.",
    required=["networkName"],
)

RESOURCE_CLAIM_NETWORK: Schema = obj(
    {
        "claimName": string("Name of the resource claim in spec.resourceClaims."),
        "requestName": string("Request within that claim."),
    },
    "A network device allocated through a DRA resource claim.",
)

NETWORK: Schema = obj(
    {
        "multus": MULTUS_NETWORK,
        "name": string("Network name (DNS label), referred to by an interface."),
        "pod": POD_NETWORK,
        "resourceClaim": RESOURCE_CLAIM_NETWORK,
    },
    "A network the guest can connect to; exactly one network type may be set.",
    required=["name"],
)

NETWORKS: Schema = array(NETWORK, "Networks the interfaces connect to.", max_items=256)

INTERFACE_STATUS: Schema = array(
    obj(
        {
            "infoSource": string("Where the data comes from: domain, guest-agent, multus-status, …"),
            "interfaceName": string("Interface name inside the guest."),
            "ipAddress": string("Primary IP address."),
            "ipAddresses": array(string(), "All IP addresses."),
            "linkState": string("Link state: up or down."),
            "mac": string("MAC address."),
            "name": string("Name of the interface in the spec."),
            "podInterfaceName": string("Interface name in the launcher pod."),
            "queueCount": integer("Number of queues of the NIC."),
        }
    ),
    "Network interfaces of the running guest.",
)
