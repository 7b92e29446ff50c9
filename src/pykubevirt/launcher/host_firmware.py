"""The node's EFI firmware and TPM emulator: KubeVirt's efi.DetectEFIEnvironment over the OVMF directory, plus swtpm.

KubeVirt's launcher image always carries both; here they come from the host's packages (`ovmf`, `swtpm`), so a
missing one must become a clear start error instead of libvirt's "Failed to open file" or "TPM version '2.0' is not
supported".
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

EFI_CODE = "OVMF_CODE.fd"
EFI_VARS = "OVMF_VARS.fd"
EFI_CODE_SECURE_BOOT = "OVMF_CODE.secboot.fd"
# KubeVirt's image names the Secure Boot vars template (Microsoft's keys enrolled) OVMF_VARS.secboot.fd; Debian's
# ovmf package ships the same thing as OVMF_VARS.ms.fd.
EFI_VARS_SECURE_BOOT = ("OVMF_VARS.secboot.fd", "OVMF_VARS.ms.fd")
OVMF_PACKAGE = "ovmf"
TPM_PACKAGES = "swtpm and swtpm-tools"
# libvirt runs swtpm_setup (swtpm-tools) to create the state, then swtpm itself.
TPM_BINARIES = ("swtpm", "swtpm_setup")


@dataclass(frozen=True, slots=True)
class HostFirmware:
    """Absolute paths of the usable firmware images ("" when missing) and whether the TPM emulator is installed."""

    efi_code: str = ""
    efi_vars: str = ""
    efi_secure_code: str = ""
    efi_secure_vars: str = ""
    tpm_emulator: bool = False


def _readable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.R_OK)


def _first(directory: Path, names: tuple[str, ...]) -> str:
    return next((str(directory / name) for name in names if _readable(directory / name)), "")


def detect(ovmf_dir: Path, which: Callable[[str], str | None] = shutil.which) -> HostFirmware:
    """Like DetectEFIEnvironment: a code/vars pair counts only when both files are there."""
    code, variables = _first(ovmf_dir, (EFI_CODE,)), _first(ovmf_dir, (EFI_VARS,))
    secure_code, secure_vars = _first(ovmf_dir, (EFI_CODE_SECURE_BOOT,)), _first(ovmf_dir, EFI_VARS_SECURE_BOOT)
    if not (code and variables):
        code = variables = ""
    if not (secure_code and secure_vars):
        secure_code = secure_vars = ""
    tpm = all(which(binary) is not None for binary in TPM_BINARIES)
    return HostFirmware(code, variables, secure_code, secure_vars, tpm)
