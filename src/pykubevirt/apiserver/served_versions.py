"""A custom resource read and written through any served version of its CRD (conversion strategy None).

As apiextensions-apiserver's nopConverter: the object is stored in the CRD's storage version and served in the
version of the request, and only its apiVersion differs between the two.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.store_records import Record


def storage_api_version(resource: Resource) -> str:
    return f"{resource.group}/{resource.storage_version}" if resource.group else resource.storage_version


def served(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as the resource's version shows it: the stored object itself when it is in that version already."""
    if not resource.storage_version:
        return obj
    api_version = resource.api_version
    if obj.get("apiVersion") == api_version:
        return obj
    return {**obj, "apiVersion": api_version}


def served_record(resource: Resource, record: Record | None) -> Record | None:
    if record is None or not resource.storage_version:
        return record
    value = served(resource, record.value)
    return record if value is record.value else dataclasses.replace(record, value=value)


def stored(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` (of the request's version) as it is stored."""
    if not resource.storage_version:
        return obj
    api_version = storage_api_version(resource)
    if obj.get("apiVersion") == api_version:
        return obj
    return {**obj, "apiVersion": api_version}
