"""When virt-handler leaves a launcher's domain to libvirt instead of destroying it: the source of a migration that runs
or handed the guest over (libvirt shuts it off as Migrated once the target confirms)."""

from __future__ import annotations

import pytest

from pykubevirt.handler.migration_source import leaving_by_migration


@pytest.mark.parametrize("state", ["Running", "Succeeded"])
def test_a_source_whose_migration_runs_or_succeeded_is_left_to_libvirt(state: str) -> None:
    assert leaving_by_migration({"role": "source", "migrationUid": "m1", "state": state})


@pytest.mark.parametrize(
    "migration",
    [
        None,
        {},
        {"role": "source", "state": "Failed", "failed": True},  # the guest stays here: a VMI gone means stop it
        {"role": "target", "state": "Succeeded", "completed": True},  # the guest runs here now
        {"role": "target", "state": "TargetReady"},
    ],
)
def test_anything_else_is_stopped_as_an_orphan(migration: dict[str, object] | None) -> None:
    assert not leaving_by_migration(migration)
