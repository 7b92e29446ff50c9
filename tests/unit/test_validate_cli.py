"""`pykubevirt validate` gives the outcomes INDEX.md states for the examples; bad input is one readable line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import paths

EXAMPLES = paths.EXAMPLES
SCENARIOS = EXAMPLES / "scenarios"
HEADER = re.compile(r"^# scenario: .*; expect: (?P<outcome>accept|reject: (?P<message>.*))$")

# Seed outcomes from INDEX.md's seed table (the embedded server's schema check comes before admission, as on a
# real cluster, so stopped-vm is rejected by the CRD schema).
SEED_REJECTIONS = {
    "003-vm-stopped-vm.yaml": 'VirtualMachine.kubevirt.io "stopped-vm" is invalid: spec.template: Required value',
}


def run_validate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pykubevirt.cli.main", "validate", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def whole_tree() -> subprocess.CompletedProcess[str]:
    return run_validate("-f", str(EXAMPLES), "-o", "json")


def _rejections(stderr: str) -> dict[str, str]:
    found = {}
    for line in stderr.splitlines():
        match = re.match(r"^rejected: (?P<file>\S+) \(document \d+\): \S+: (?P<message>.*)$", line)
        if match:
            found[Path(match["file"]).name] = match["message"]
    return found


def test_every_scenario_has_its_stated_outcome(whole_tree: subprocess.CompletedProcess[str]) -> None:
    rejected = _rejections(whole_tree.stderr)
    checked = 0
    for path in sorted(SCENARIOS.glob("*.yaml")):
        header = HEADER.match(path.read_text().splitlines()[0])
        assert header, path
        if header["outcome"] == "accept":
            assert path.name not in rejected, f"{path.name}: {rejected.get(path.name)}"
        else:
            assert path.name in rejected, f"{path.name} should be rejected"
            assert header["message"] in rejected[path.name], path.name
        checked += 1
    assert checked == 103


def test_seed_outcomes(whole_tree: subprocess.CompletedProcess[str]) -> None:
    rejected = _rejections(whole_tree.stderr)
    seeds = {p.name for p in (EXAMPLES / "seed").glob("*.yaml")}
    for name in seeds:
        if name in SEED_REJECTIONS:
            assert rejected.get(name) == SEED_REJECTIONS[name]
        else:
            assert name not in rejected, f"{name}: {rejected.get(name)}"
    assert whole_tree.returncode == 1


def test_masquerade_ports_names_the_field_and_where_it_belongs(whole_tree: subprocess.CompletedProcess[str]) -> None:
    message = _rejections(whole_tree.stderr)["087-masq-ports-http-https.yaml"]
    assert message.startswith(
        'VirtualMachine in version "v1" cannot be handled as a VirtualMachine: strict decoding error:'
    )
    assert 'unknown field "spec.template.spec.domain.devices.interfaces[0].masquerade.ports"' in message
    assert "spec.template.spec.domain.devices.interfaces[0].ports" in message


def test_defaults_are_printed_and_other_kinds_pass_through(tmp_path: Path) -> None:
    result = run_validate("-f", str(EXAMPLES / "seed" / "001-vmi-centos01.yaml"), "-o", "json")
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    pvc, vmi = listing["items"]
    assert pvc == next(yaml.safe_load_all((EXAMPLES / "seed" / "001-vmi-centos01.yaml").read_text()))
    assert vmi["spec"]["domain"]["machine"] == {"type": "q35"}
    assert vmi["metadata"]["finalizers"] == ["kubevirt.io/foregroundDeleteVirtualMachine"]
    assert vmi["status"]["phase"] == "Pending"


def test_warning_for_deprecated_running() -> None:
    result = run_validate("-f", str(SCENARIOS / "101-rs-running-true.yaml"), "-o", "none")
    assert result.returncode == 0
    assert "spec.running is deprecated, please use spec.runStrategy instead." in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("apiVersion: v1\nkind: [unclosed\n", "invalid YAML at line 3"),
        ("- just\n- a list\n", "expected an object, got list"),
        (
            "apiVersion: kubevirt.io/v1\nkind: VirtualMachineFoo\nmetadata: {name: x}\n",
            'no matches for kind "VirtualMachineFoo"',
        ),
        ("{not json", "invalid JSON"),
        ("kind: VirtualMachine\nmetadata: {name: x}\n", "Object 'apiVersion' is missing"),
    ],
)
def test_bad_input_is_one_clear_line(text: str, expected: str) -> None:
    result = run_validate("-f", "-", stdin=text)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "<stdin> (document 0)" in lines[0]
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


def test_missing_file_is_reported() -> None:
    result = run_validate("-f", "/nonexistent/vm.yaml")
    assert result.returncode == 1
    assert result.stderr.strip() == "error: /nonexistent/vm.yaml (document 0): no such file or directory"
