"""The images' definitions: tags from the commit, umoci's configuration flags, apt sources and the install script."""

from __future__ import annotations

import importlib.resources
import subprocess
from pathlib import Path

import pytest
import yaml

from pykubevirt import __version__
from pykubevirt.cli.main import build_parser
from pykubevirt.controller.launcher_pod import VIRT_TAIL_BINARY, LauncherSettings
from pykubevirt.images import spec
from tests.paths import REPO

COMMIT = "0123456789abcdef0123456789abcdef01234567"
HOST_SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
"""


def test_tags_come_from_the_commit_then_the_version_and_latest() -> None:
    assert spec.image_tags(COMMIT, dirty=False) == ("git-0123456789ab", __version__, "latest")
    assert spec.image_tags(COMMIT, dirty=True)[0] == "git-0123456789ab-dirty"
    with pytest.raises(ValueError, match="not a git commit"):
        spec.image_tags("main", dirty=False)


def test_references_name_the_images_deploy_names() -> None:
    assert spec.PYKUBEVIRT.reference("latest") == "pykubevirt:latest"
    # skopeo's docker-archive records the names containerd resolves the short ones to.
    assert spec.PYKUBEVIRT.normalized_reference("latest") == "docker.io/library/pykubevirt:latest"
    assert spec.LAUNCHER.normalized_reference("v") == "docker.io/library/virt-launcher:v"
    kustomization = yaml.safe_load((REPO / "deploy/kustomization.yaml").read_text())
    named = {image["name"]: image.get("newTag") for image in kustomization["images"]}
    assert named == {image.repository: "latest" for image in spec.IMAGES}
    controller = yaml.safe_load((REPO / "deploy/virt-controller/deployment.yaml").read_text())
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["VIRT_LAUNCHER_IMAGE"] == spec.LAUNCHER.repository


def test_every_entrypoint_is_a_command_of_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    commands = [check[1] for image in spec.IMAGES for check in image.checks if check[0] == "pykubevirt"]
    assert commands == ["virt-controller", "virt-api", "virt-handler", "virt-launcher"]
    for command in commands:
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([command, "--help"])
        assert exited.value.code == 0
        assert f"usage: pykubevirt {command}" in capsys.readouterr().out
    # The launcher pod's compute container runs the image's entrypoint.
    assert tuple(LauncherSettings().command_prefix) == spec.LAUNCHER.entrypoint


def test_config_flags_carry_entrypoint_command_path_and_labels() -> None:
    args = spec.config_args(spec.LAUNCHER, commit=COMMIT, epoch=1_700_000_000)
    assert args[-1] == "--no-history"
    pairs = list(zip(args[:-1:2], args[1:-1:2], strict=True))
    assert [v for k, v in pairs if k == "--config.entrypoint"] == ["pykubevirt", "virt-launcher"]
    assert [v for k, v in pairs if k == "--config.cmd"] == ["--help"]
    assert ("--config.env", f"PATH={spec.PATH}") in pairs
    assert spec.PATH.startswith(f"{spec.VENV}/bin:")
    assert ("--created", "2023-11-14T22:13:20Z") in pairs
    assert ("--config.label", f"org.opencontainers.image.revision={COMMIT}") in pairs
    assert ("--config.label", "org.opencontainers.image.created=2023-11-14T22:13:20Z") in pairs


def test_apt_sources_keep_the_suite_updates_and_security_without_comments() -> None:
    sources = spec.apt_sources(HOST_SOURCES)
    assert sources == (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    assert spec.mirror(HOST_SOURCES) == "http://deb.debian.org/debian"
    with pytest.raises(ValueError, match="no deb source"):
        spec.apt_sources("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\n")


def test_install_script_installs_lean_and_keeps_one_schema_directory() -> None:
    script = spec.install_script(spec.LAUNCHER, epoch=1_700_000_000, update=True)
    assert "apt-get update -qq\n" in script
    assert "--no-install-recommends python3 qemu-system-x86 qemu-utils libvirt-daemon " in script
    assert f"pykubevirt=={__version__}" in script
    assert "--invalidation-mode checked-hash" in script and " SOURCE_DATE_EPOCH=1700000000\n" in script
    assert f"--uid {spec.QEMU_UID} --gid {spec.QEMU_UID}" in script
    assert "apt-get update" not in spec.install_script(spec.PYKUBEVIRT, epoch=0, update=False)
    # The directory kept is one kubernetes-validate ships.
    shipped = importlib.resources.files("kubernetes_validate").joinpath("kubernetes-json-schema", spec.schema_dir())
    assert shipped.joinpath("_definitions.json").is_file()


def test_slim_filters_drop_docs_but_keep_copyright() -> None:
    lines = spec.DPKG_EXCLUDES.splitlines()
    assert "path-exclude=/usr/share/doc/*" in lines and "path-include=/usr/share/doc/*/copyright" in lines
    assert 'APT::Install-Recommends "false";' in spec.APT_CONF.splitlines()


def test_virt_tail_prints_the_log_and_follows_it(tmp_path: Path) -> None:
    # The launcher pod's guest-console-log container runs this file of the launcher image.
    assert dict(spec.LAUNCHER.files)[VIRT_TAIL_BINARY] == spec.VIRT_TAIL
    script = tmp_path / "virt-tail"
    script.write_text(spec.VIRT_TAIL)
    script.chmod(0o755)
    log = tmp_path / "serial0"
    log.write_text("boot\n")
    with subprocess.Popen([str(script), "--logfile", str(log)], stdout=subprocess.PIPE, text=True) as tail:
        assert tail.stdout is not None
        assert tail.stdout.readline() == "boot\n"
        with log.open("a") as serial:
            serial.write("login:\n")
        assert tail.stdout.readline() == "login:\n"
        tail.terminate()
    missing = subprocess.run([str(script)], capture_output=True, text=True)
    assert missing.returncode == 2 and "--logfile is required" in missing.stderr
