"""Hostname, subdomain, DNS policy and DNS config (the latter two copied by KubeVirt from Kubernetes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.validation.common import go_list, parse_ip
from pykubevirt.api.causes import Cause, FieldPath, invalid, not_supported, required
from pykubevirt.api.json_lookup import as_list, as_map, as_str
from pykubevirt.api.name_validation import dns1123_label_errors, dns1123_subdomain_errors

MAX_NAMESERVERS = 3
MAX_SEARCH_PATHS = 6
MAX_SEARCH_LIST_CHARS = 256
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None", "")


def validate_hostname(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    hostname = as_str(spec.get("hostname"))
    errors = dns1123_label_errors(hostname) if hostname else []
    if not errors:
        return []
    path = field.child("hostname")
    return [invalid(str(path), f"{path} does not conform to the kubernetes DNS_LABEL rules : {', '.join(errors)}")]


def validate_subdomain(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    subdomain = as_str(spec.get("subdomain"))
    errors = dns1123_subdomain_errors(subdomain) if subdomain else []
    if not errors:
        return []
    path = field.child("subdomain")
    return [invalid(str(path), f"{path} does not conform to the kubernetes DNS_SUBDOMAIN rules : {', '.join(errors)}")]


def validate_dns_policy(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    policy = as_str(spec.get("dnsPolicy"))
    if policy in DNS_POLICIES:
        return []
    path = field.child("dnsPolicy")
    return [not_supported(str(path), f"DNSPolicy: {policy} is not supported, valid values: {go_list(DNS_POLICIES)}")]


def validate_dns_config(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    """validatePodDNSConfig; upstream names the nested fields without their parent path."""
    config = spec.get("dnsConfig")
    path = field.child("dnsConfig")
    causes: list[Cause] = []
    nameservers = [as_str(n) for n in as_list(as_map(config).get("nameservers"))]
    if as_str(spec.get("dnsPolicy")) == "None":
        if config is None:
            return [required(str(path), "must provide `dnsConfig` when `dnsPolicy` is None")]
        if not nameservers:
            return [required("nameservers", "must provide at least one DNS nameserver when `dnsPolicy` is None")]
    if config is None:
        return causes
    if len(nameservers) > MAX_NAMESERVERS:
        causes.append(
            invalid("nameservers", f"must not have more than {MAX_NAMESERVERS} nameservers: {go_list(nameservers)}")
        )
    for server in nameservers:
        if parse_ip(server) is None:
            causes.append(invalid("nameservers", f"must be valid IP address: {server}"))
    searches = [as_str(s) for s in as_list(as_map(config).get("searches"))]
    if len(searches) > MAX_SEARCH_PATHS:
        causes.append(invalid("searchDomains", f"must not have more than {MAX_SEARCH_PATHS} search paths"))
    if len(" ".join(searches)) > MAX_SEARCH_LIST_CHARS:
        causes.append(
            invalid(
                "searchDomains",
                f"must not have more than {MAX_SEARCH_LIST_CHARS} characters (including spaces) in the search list",
            )
        )
    for search in searches:
        causes += [invalid("searchDomains", msg) for msg in dns1123_subdomain_errors(search)]
    for option in as_list(as_map(config).get("options")):
        if not as_str(as_map(option).get("name")):
            causes.append(invalid("options", "Option.Name must not be empty"))
    return causes
