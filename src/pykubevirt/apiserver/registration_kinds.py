"""The kinds through which kube-apiserver is extended: webhook configurations and APIServices (`--plain` serves them;
the embedded mode runs KubeVirt in-process instead)."""

from __future__ import annotations

from pykubevirt.apiserver.builtin import OPEN_SCHEMA
from pykubevirt.apiserver.resources import Resource

WEBHOOK_GROUP = "admissionregistration.k8s.io"
AGGREGATION_GROUP = "apiregistration.k8s.io"

MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    WEBHOOK_GROUP,
    "v1",
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    "mutatingwebhookconfiguration",
    False,
    OPEN_SCHEMA,
    categories=("api-extensions",),
    builtin=True,
)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    WEBHOOK_GROUP,
    "v1",
    "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
    "validatingwebhookconfiguration",
    False,
    OPEN_SCHEMA,
    categories=("api-extensions",),
    builtin=True,
)
API_SERVICES = Resource(
    AGGREGATION_GROUP,
    "v1",
    "APIService",
    "apiservices",
    "apiservice",
    False,
    OPEN_SCHEMA,
    categories=("api-extensions",),
    subresources=frozenset({"status"}),
    builtin=True,
)

REGISTRATION_RESOURCES = (MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS, API_SERVICES)
