"""KubeVirt's mutating admission (virt-api defaults) as pure functions on plain dicts."""

from __future__ import annotations

from pykubevirt.admission.defaults.clone_mutator import mutate_vm_clone
from pykubevirt.admission.defaults.common import MutationDenied
from pykubevirt.admission.defaults.migration_mutator import mutate_migration
from pykubevirt.admission.defaults.presets import PRESET_DEPRECATION_WARNING, preset_warnings
from pykubevirt.admission.defaults.vm_mutator import mutate_vm
from pykubevirt.admission.defaults.vmi_mutator import mutate_vmi
from pykubevirt.admission.defaults.vmi_spec import set_vmi_defaults, set_vmi_spec_defaults, supports_pcie_hotplug

__all__ = [
    "PRESET_DEPRECATION_WARNING",
    "MutationDenied",
    "mutate_migration",
    "mutate_vm",
    "mutate_vm_clone",
    "mutate_vmi",
    "preset_warnings",
    "set_vmi_defaults",
    "set_vmi_spec_defaults",
    "supports_pcie_hotplug",
]
