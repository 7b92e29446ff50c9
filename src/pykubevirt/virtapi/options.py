"""Request bodies of the subresource calls (Start, Stop, Restart and Pause options), decoded as Go does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from pykubevirt.api import errors
from pykubevirt.api.go_json import go_json_value

UNMARSHAL_ERROR = "Can not unmarshal Request body to struct, error: %s"
DRY_RUN_ALL = "All"


@dataclass(frozen=True, slots=True)
class StartOptions:
    paused: bool = False
    dry_run: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StopOptions:
    grace_period: int | None = None
    dry_run: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RestartOptions:
    grace_period_seconds: int | None = None
    dry_run: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PauseOptions:
    dry_run: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EvacuateCancelOptions:
    evacuation_node_name: str = ""
    dry_run: tuple[str, ...] = ()


def unmarshal_error(message: str) -> errors.APIError:
    """virt-api's 400 for a body that does not decode into the options struct."""
    return errors.bad_request(UNMARSHAL_ERROR % message)


def decode_body(body: bytes, type_name: str) -> dict[str, Any]:
    """The body as an object; empty and `null` bodies are empty options (Go leaves the struct at its zero value)."""
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except ValueError:
        # virt-api decodes YAML or JSON.
        try:
            value = yaml.safe_load(body.decode("utf-8", "replace"))
        except yaml.YAMLError as exc:
            raise unmarshal_error(f"error converting YAML to JSON: {exc}") from exc
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise unmarshal_error(f"json: cannot unmarshal {go_json_value(value)} into Go value of type v1.{type_name}")
    return value


def _field(body: dict[str, Any], key: str, kind: type, type_name: str, go_type: str) -> Any:
    value = body.get(key)
    if value is None:
        return None
    # bool is an int in Python; Go keeps them apart.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise unmarshal_error(
            f"json: cannot unmarshal {go_json_value(value)} into Go struct field {type_name}.{key} of type {go_type}"
        )
    return value


def dry_run_values(body: dict[str, Any], type_name: str) -> tuple[str, ...]:
    """The options' `dryRun`, each value checked to be `All`."""
    values = _field(body, "dryRun", list, type_name, "[]string") or []
    if not all(isinstance(v, str) for v in values):
        raise unmarshal_error(f"json: cannot unmarshal number into Go struct field {type_name}.dryRun of type string")
    for value in values:
        if value != DRY_RUN_ALL:
            raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "{DRY_RUN_ALL}"')
    return tuple(values)


def parse_start(body: bytes) -> StartOptions:
    data = decode_body(body, "StartOptions")
    return StartOptions(
        paused=bool(_field(data, "paused", bool, "StartOptions", "bool")), dry_run=dry_run_values(data, "StartOptions")
    )


def parse_stop(body: bytes) -> StopOptions:
    data = decode_body(body, "StopOptions")
    return StopOptions(
        grace_period=_field(data, "gracePeriod", int, "StopOptions", "int64"),
        dry_run=dry_run_values(data, "StopOptions"),
    )


def parse_restart(body: bytes) -> RestartOptions:
    data = decode_body(body, "RestartOptions")
    return RestartOptions(
        grace_period_seconds=_field(data, "gracePeriodSeconds", int, "RestartOptions", "int64"),
        dry_run=dry_run_values(data, "RestartOptions"),
    )


def parse_pause(body: bytes, type_name: str = "PauseOptions") -> PauseOptions:
    return PauseOptions(dry_run=dry_run_values(decode_body(body, type_name), type_name))


def parse_evacuate_cancel(body: bytes) -> EvacuateCancelOptions:
    decoded = decode_body(body, "EvacuateCancelOptions")
    node = _field(decoded, "evacuationNodeName", str, "EvacuateCancelOptions", "string") or ""
    return EvacuateCancelOptions(node, dry_run_values(decoded, "EvacuateCancelOptions"))


def is_dry_run(dry_run: tuple[str, ...]) -> bool:
    """What `dryRun: ["All"]` asks for: validate and answer, persist nothing."""
    return bool(dry_run) and dry_run[0] == DRY_RUN_ALL
