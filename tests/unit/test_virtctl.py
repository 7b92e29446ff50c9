"""virtctl's command line (kubectl-style flags, pflag booleans, errors) and virt-api helpers without a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykubevirt.api.handler_address import handler_url
from pykubevirt.client.errors import ApiError
from pykubevirt.virtapi.app import is_test_failure
from pykubevirt.virtapi.discovery import resource_list, version_info
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.commands import format_version
from pykubevirt.virtctl.main import build_parser, main, normalise_bools


def test_global_flags_before_or_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["-n", "ns1", "--context", "c", "start", "vm"])
    after = parser.parse_args(["start", "vm", "--namespace=ns2", "--kubeconfig", "/k"])
    assert (before.namespace, before.context, before.name) == ("ns1", "c", "vm")
    assert (after.namespace, after.kubeconfig, after.context) == ("ns2", "/k", None)
    assert parser.parse_args(["stop", "vm", "--grace-period", "0", "--force"]).grace_period == 0
    pause = parser.parse_args(["pause", "vmi", "x", "--dry-run"])
    assert (pause.type, pause.name, pause.dry_run) == ("vmi", "x", True)


def test_pflag_booleans() -> None:
    assert normalise_bools(["start", "vm", "--paused=true", "--dry-run=false"]) == ["start", "vm", "--paused"]
    assert normalise_bools(["--grace-period=0"]) == ["--grace-period=0"]
    with pytest.raises(VirtctlError, match=r"strconv\.ParseBool"):
        normalise_bools(["--force=maybe"])


def test_errors_are_one_line_with_status_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["stop", "vm", "--force", "--kubeconfig", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["--kubeconfig", str(tmp_path / "none"), "stop", "vm", "--grace-period=0"]) == 1
    # The kubeconfig is read first, as upstream builds its client before checking flags.
    assert "cannot read kubeconfig" in capsys.readouterr().err
    assert main(["start"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "name" in err


def test_version_client_only_needs_no_cluster(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["version", "--client", "--kubeconfig", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert out.startswith('Client Version: version.Info{GitVersion:"v') and out.count("\n") == 1


def test_format_version_is_gos_struct_print() -> None:
    info = {"gitVersion": "v1.2.3", "platform": "linux/amd64"}
    assert format_version(info) == (
        'version.Info{GitVersion:"v1.2.3", GitCommit:"", GitTreeState:"", BuildDate:"", GoVersion:"", Compiler:"", '
        'Platform:"linux/amd64"}'
    )
    assert set(version_info()) == {
        "gitVersion",
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    }


def test_handler_addresses() -> None:
    assert handler_url("127.0.0.1:8186") == "http://127.0.0.1:8186"
    assert handler_url("https://10.0.0.5:8186/") == "https://10.0.0.5:8186"
    assert handler_url("http://[::1]:8186") == "http://[::1]:8186"


def test_json_patch_test_failures_are_recognised() -> None:
    ours = ApiError({"code": 422, "reason": "Invalid", "message": "testing value /spec/runStrategy failed"}, 422)
    kube = ApiError(
        {
            "code": 422,
            "reason": "Invalid",
            "message": "the server rejected our request due to an error in our request",
            "details": {"causes": [{"message": "testing value /status/stateChangeRequests failed: test failed"}]},
        },
        422,
    )
    other = ApiError({"code": 422, "reason": "Invalid", "message": "spec.running: Invalid value"}, 422)
    assert is_test_failure(ours) and is_test_failure(kube) and not is_test_failure(other)


def test_resource_list_shape() -> None:
    listing = resource_list("v1alpha3")
    assert listing["groupVersion"] == "subresources.kubevirt.io/v1alpha3"
    assert all(r["namespaced"] and r["verbs"] for r in listing["resources"])
