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
EFI_VARS_SECURE_BOOT = "OVMF_VARS.secboot.fd"
# (code, vars template) pairs, KubeVirt's names first. Debian's ovmf has no OVMF_VARS.secboot.fd: its Secure Boot
# pair is the 4 MiB build with the Microsoft-keys vars (OVMF_VARS_4M.ms.fd); its 2 MiB Secure Boot build never
# reached the boot manager under QEMU 7.2 with SMM here.
EFI_PAIRS = ((EFI_CODE, EFI_VARS), ("OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd"))
EFI_SECURE_BOOT_PAIRS = (
    (EFI_CODE_SECURE_BOOT, EFI_VARS_SECURE_BOOT),
    ("OVMF_CODE_4M.secboot.fd", "OVMF_VARS_4M.ms.fd"),
)
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


def _pair(directory: Path, pairs: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """The first pair whose two files are both there (a code image needs vars of its own size)."""
    for code, variables in pairs:
        if _readable(directory / code) and _readable(directory / variables):
            return str(directory / code), str(directory / variables)
    return "", ""


def detect(ovmf_dir: Path, which: Callable[[str], str | None] = shutil.which) -> HostFirmware:
    """Like DetectEFIEnvironment: a code/vars pair counts only when both files are there."""
    code, variables = _pair(ovmf_dir, EFI_PAIRS)
    secure_code, secure_vars = _pair(ovmf_dir, EFI_SECURE_BOOT_PAIRS)
    tpm = all(which(binary) is not None for binary in TPM_BINARIES)
    return HostFirmware(code, variables, secure_code, secure_vars, tpm)
