"""The node's firmware: which OVMF images the launcher hands the converter, and the start error when one is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykubevirt.launcher.converter import ConversionError
from pykubevirt.launcher.host_firmware import HostFirmware, detect
from tests.unit.test_converter import dom_of, new_vmi

DEBIAN_12 = (
    *("OVMF_CODE.fd", "OVMF_CODE.secboot.fd", "OVMF_VARS.fd", "OVMF_VARS.ms.fd"),
    *("OVMF_CODE_4M.fd", "OVMF_CODE_4M.secboot.fd", "OVMF_VARS_4M.fd", "OVMF_VARS_4M.ms.fd"),
)


def ovmf_dir(tmp_path: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        (tmp_path / name).write_bytes(b"\0" * 16)
    return tmp_path


def with_swtpm(name: str) -> str | None:
    return f"/usr/bin/{name}"


def test_debian_12_ovmf_package_gives_both_pairs_the_4m_ms_one_for_secure_boot(tmp_path: Path) -> None:
    found = detect(ovmf_dir(tmp_path, DEBIAN_12), which=with_swtpm)
    assert found == HostFirmware(
        efi_code=str(tmp_path / "OVMF_CODE.fd"),
        efi_vars=str(tmp_path / "OVMF_VARS.fd"),
        efi_secure_code=str(tmp_path / "OVMF_CODE_4M.secboot.fd"),
        efi_secure_vars=str(tmp_path / "OVMF_VARS_4M.ms.fd"),
        tpm_emulator=True,
    )


def test_kubevirt_image_names_win_over_debian_ones(tmp_path: Path) -> None:
    found = detect(ovmf_dir(tmp_path, (*DEBIAN_12, "OVMF_VARS.secboot.fd")), which=with_swtpm)
    assert (found.efi_secure_code, found.efi_secure_vars) == (
        str(tmp_path / "OVMF_CODE.secboot.fd"),
        str(tmp_path / "OVMF_VARS.secboot.fd"),
    )


def test_a_pair_counts_only_whole_and_swtpm_needs_swtpm_setup(tmp_path: Path) -> None:
    names = ("OVMF_CODE.fd", "OVMF_CODE_4M.secboot.fd", "OVMF_VARS_4M.ms.fd", "OVMF_VARS_4M.fd")
    found = detect(ovmf_dir(tmp_path, names), which=lambda n: None)
    # OVMF_CODE.fd has no OVMF_VARS.fd, and 4 MiB vars do not pair with 2 MiB code.
    assert (found.efi_code, found.efi_vars) == ("", "")
    assert found.efi_secure_code.endswith("OVMF_CODE_4M.secboot.fd")
    assert not found.tpm_emulator
    only_swtpm = detect(tmp_path, which=lambda n: "/usr/bin/swtpm" if n == "swtpm" else None)
    assert not only_swtpm.tpm_emulator


def test_no_ovmf_directory_at_all(tmp_path: Path) -> None:
    assert detect(tmp_path / "absent", which=lambda n: None) == HostFirmware()


def test_host_paths_reach_the_domain(tmp_path: Path) -> None:
    found = detect(ovmf_dir(tmp_path, DEBIAN_12), which=with_swtpm)
    vmi = new_vmi({"firmware": {"bootloader": {"efi": {}}}, "features": {"smm": {}}})
    dom = dom_of(
        vmi,
        efi_code=found.efi_code,
        efi_vars=found.efi_vars,
        efi_secure_code=found.efi_secure_code,
        efi_secure_vars=found.efi_secure_vars,
    )
    # secureBoot defaults to true with EFI: the Secure Boot build, its Microsoft-keys vars as the per-VMI template.
    assert dom.findtext("os/loader") == str(tmp_path / "OVMF_CODE_4M.secboot.fd")
    assert dom.find("os/loader").get("secure") == "yes"
    assert dom.find("os/nvram").get("template") == str(tmp_path / "OVMF_VARS_4M.ms.fd")
    assert dom.findtext("os/nvram").endswith("/testvmi_VARS.fd")
    assert dom.find("features/smm") is not None


@pytest.mark.parametrize(("secure", "mode"), [(True, "enabled"), (False, "disabled")])
def test_missing_ovmf_is_a_conversion_error_naming_the_package(secure: bool, mode: str) -> None:
    vmi = new_vmi({"firmware": {"bootloader": {"efi": {"secureBoot": secure}}}, "features": {"smm": {}}})
    blank = {"efi_code": "", "efi_vars": "", "efi_secure_code": "", "efi_secure_vars": ""}
    with pytest.raises(ConversionError) as raised:
        dom_of(vmi, **blank)
    assert str(raised.value) == (
        f"EFI OVMF rom missing for booting in EFI mode with SecureBoot {mode}: "
        "install the ovmf package on the node (make setup)"
    )


def test_missing_swtpm_is_a_conversion_error_naming_the_packages() -> None:
    vmi = new_vmi({"devices": {"tpm": {}}})
    with pytest.raises(ConversionError, match="install the swtpm and swtpm-tools packages on the node"):
        dom_of(vmi, tpm_emulator=False)
    assert dom_of(vmi).find("devices/tpm/backend").get("type") == "emulator"
