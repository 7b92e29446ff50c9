"""Shell completion: `pykubevirt completion` scripts that bash really completes with, and `make setup`'s installer
(scripts/install-completion.sh) into a venv whose activate then loads them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pykubevirt.cli.cluster_layout import pykubevirt_argv
from tests.paths import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(pykubevirt_argv(*args), capture_output=True, text=True, timeout=90, check=False)


def _complete(script: Path, command: str, line: str) -> list[str]:
    """What bash offers for the last word of `line` with `script` loaded, as a user's Tab would."""
    words = line.split(" ")
    probe = (
        f"source {script}; COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1};"
        f" COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; _shtab_{command}; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    return subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.parametrize("command", ["pykubevirt", "virtctl"])
def test_bash_completion_is_valid_and_knows_the_subcommands(tmp_path: Path, command: str) -> None:
    result = _run("completion", "bash", "--command", command)
    assert result.returncode == 0, result.stderr
    script = tmp_path / command
    script.write_text(result.stdout)
    subprocess.run(["bash", "-n", str(script)], check=True)
    words = _complete(script, command, f"{command} ")
    wanted = {"pykubevirt": {"up", "down", "doctor", "completion"}, "virtctl": {"console", "start", "stop"}}[command]
    assert wanted <= set(words), words


def test_zsh_completion_is_a_compdef() -> None:
    result = _run("completion", "zsh", "--command", "virtctl")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#compdef virtctl")


def test_subcommand_flags_complete(tmp_path: Path) -> None:
    script = tmp_path / "pykubevirt"
    script.write_text(_run("completion", "bash").stdout)
    assert {"--data-dir", "--listen"} <= set(_complete(script, "pykubevirt", "pykubevirt doctor --"))


def test_setup_installs_completion_into_the_venv_and_activate_loads_it(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("# a venv's activate\n")
    generator = " ".join([sys.executable, "-m", "pykubevirt.cli.main"])
    env = {**os.environ, "PYKUBEVIRT": generator}
    for _ in range(2):  # idempotent: the second run neither fails nor adds a second hook
        subprocess.run([str(REPO / "scripts" / "install-completion.sh"), str(venv)], env=env, check=True, timeout=180)
    activate = (venv / "bin" / "activate").read_text()
    assert activate.count("# pykubevirt: shell completion") == 1
    for command in ("pykubevirt", "virtctl"):
        assert (venv / "share" / "zsh" / "site-functions" / f"_{command}").read_text().startswith(f"#compdef {command}")
    loaded = subprocess.run(
        ["bash", "-c", f"VIRTUAL_ENV={venv}; . {venv}/bin/activate; complete -p pykubevirt virtctl"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert loaded == [
        "complete -o bashdefault -F _shtab_pykubevirt pykubevirt",
        "complete -o bashdefault -F _shtab_virtctl virtctl",
    ]
