"""virtctl port-forward, ssh and expose without a server: targets, ports, the ssh command line, the Service body;
and virt-api's portforward path parameters."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

import pytest

from pykubevirt.api import errors
from pykubevirt.virtapi.portforward import Target, check_port_forward, host_port, parse_target, target_address
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.expose import pod_network_ports, service_manifest
from pykubevirt.virtctl.main import attach_dash_values, build_parser, normalise_bools
from pykubevirt.virtctl.portforward import ForwardedPort, ForwardTarget, parse_port
from pykubevirt.virtctl.portforward import parse_target as parse_forward_target
from pykubevirt.virtctl.scp import Copy, parse_copy, scp_argv
from pykubevirt.virtctl.ssh import SSHOptions, parse_ssh_target, ssh_argv


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("vmi/testvmi", ForwardTarget("vmi", "testvmi")),
        ("vm/testvm/default", ForwardTarget("vm", "testvm", "default")),
        ("VirtualMachines/testvm", ForwardTarget("vm", "testvm")),
        ("vmis/t.with.dots/ns.with.dots", ForwardTarget("vmi", "t.with.dots", "ns.with.dots")),
        # Since KubeVirt 1.7 the part after a dot is no longer a namespace.
        ("vm/testvm.default", ForwardTarget("vm", "testvm.default")),
    ],
)
def test_forward_targets(arg: str, expected: ForwardTarget) -> None:
    assert parse_forward_target(arg) == expected


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("", "target cannot be empty"),
        ("testvmi", "target must contain type and name separated by '/'"),
        (".", "target must contain type and name separated by '/'"),
        ("vmi/testvmi/", "namespace cannot be empty"),
        ("//", "namespace cannot be empty"),
        ("vmi/a/b/c", "target is not valid with more than two '/'"),
        ("invalid/testvmi", "unsupported resource type 'invalid'"),
        ("/", "unsupported resource type ''"),
        ("vmi/", "name cannot be empty"),
    ],
)
def test_forward_target_errors(arg: str, message: str) -> None:
    with pytest.raises(VirtctlError) as caught:
        parse_forward_target(arg)
    assert str(caught.value) == message


def test_forwarded_ports() -> None:
    assert parse_port("8080") == ForwardedPort(8080, 8080, "tcp")
    assert parse_port("8080:8090") == ForwardedPort(8080, 8090, "tcp")
    assert parse_port("udp/8080") == ForwardedPort(8080, 8080, "udp")
    assert parse_port("udp/8080:8090") == ForwardedPort(8080, 8090, "udp")
    for bad in ("udp/", "80C0:8X90", "udp"):
        with pytest.raises(VirtctlError):
            parse_port(bad)


def test_port_forward_command_line() -> None:
    args = build_parser().parse_args(normalise_bools(["port-forward", "--stdio=true", "vm/x", "22", "-n", "ns"]))
    assert (args.target, args.ports, args.stdio, args.address, args.namespace) == (
        "vm/x",
        ["22"],
        True,
        "127.0.0.1",
        "ns",
    )
    args = build_parser().parse_args(["port-forward", "--address", "0.0.0.0", "vmi/x", "2222:22", "8080:80"])
    assert (args.ports, args.stdio, args.address) == (["2222:22", "8080:80"], False, "0.0.0.0")


def test_ssh_targets() -> None:
    assert parse_ssh_target("jdoe@vm/testvm/ns") == (ForwardTarget("vm", "testvm", "ns"), "jdoe")
    assert parse_ssh_target("vmi/testvmi") == (ForwardTarget("vmi", "testvmi"), "")
    with pytest.raises(VirtctlError, match="expected username before '@'"):
        parse_ssh_target("@vm/x")
    with pytest.raises(VirtctlError, match="expected target after '@'"):
        parse_ssh_target("jdoe@")


def test_ssh_runs_the_local_client_through_a_port_forward_proxy_command() -> None:
    options = SSHOptions(port=2200, username="root", local_ssh_opts=["-o StrictHostKeyChecking=no"], command="hostname")
    argv = ssh_argv(ForwardTarget("vm", "web"), "ns", options, ["--kubeconfig", "/k c"])
    assert argv[:2] == ["ssh", "-o"]
    proxy = argv[2].removeprefix("ProxyCommand=")
    words = shlex.split(proxy)
    assert words[-6:] == ["--kubeconfig", "/k c", "port-forward", "--stdio=true", "vm/web/ns", "2200"][-6:]
    assert argv[3:] == ["-o StrictHostKeyChecking=no", "root@vm.web.ns", "hostname"]
    # -i only when the flag was given, as upstream; no user: ssh's own default applies.
    with_key = SSHOptions(identity_file="/id", identity_file_provided=True)
    assert ssh_argv(ForwardTarget("vmi", "a"), "d", with_key, [])[3:] == ["-i", "/id", "vmi.a.d"]


def test_ssh_local_options_may_start_with_a_dash_as_pflag_allows() -> None:
    argv = attach_dash_values(["ssh", "vm/x", "-t", "-oBatchMode=yes", "--local-ssh-opts", "-4", "-c", "-x"])
    assert argv == ["ssh", "vm/x", "--local-ssh-opts=-oBatchMode=yes", "--local-ssh-opts=-4", "-c", "-x"]
    assert build_parser().parse_args(argv[:-2]).local_ssh_opts == ["-oBatchMode=yes", "-4"]
    # version's -c is a boolean: left alone.
    assert attach_dash_values(["version", "-c", "--kubeconfig", "k"]) == ["version", "-c", "--kubeconfig", "k"]


def test_ssh_command_line() -> None:
    args = build_parser().parse_args(
        ["ssh", "root@vm/x", "-i", "/key", "-p", "2222", "-c", "uname -a", "--local-ssh-opts=-o A=b", "-t", "-4"]
    )
    assert (args.target, args.identity_file, args.port, args.ssh_command) == ("root@vm/x", "/key", 2222, "uname -a")
    assert args.command == "ssh"
    assert args.local_ssh_opts == ["-o A=b", "-4"] and args.username is None


def test_scp_finds_the_vm_side_by_its_colon() -> None:
    assert parse_copy("f.bin", "jdoe@vmi/t:dir/f.bin") == Copy(
        ForwardTarget("vmi", "t"), "jdoe", "dir/f.bin", "f.bin", True
    )
    # Only the first colon splits: the guest's path may have more.
    assert parse_copy("vm/t/ns:/a:b", "./here") == Copy(ForwardTarget("vm", "t", "ns"), "", "/a:b", "./here", False)
    assert parse_copy("vm/t:", ".").remote_path == ""
    refusals = {
        ("vm/a:x", "vm/b:y"): 'copying from a remote location to another remote location is not supported: "vm/a:x"'
        ' to "vm/b:y"',
        ("a", "b"): 'none of the two provided locations seems to be a remote location: "a" to "b"',
        ("testvm:x", "."): "target must contain type and name separated by '/'",
        (".", "@vm/x:y"): "expected username before '@'",
    }
    for (source, destination), message in refusals.items():
        with pytest.raises(VirtctlError) as refused:
            parse_copy(source, destination)
        assert str(refused.value) == message


def test_scp_runs_the_local_scp_through_the_ssh_proxy_command() -> None:
    args = build_parser().parse_args(
        normalise_bools(["scp", "-r", "--preserve=true", "-p", "2222", "-l", "me", "-i", "/id", "d", "vm/web:/srv"])
    )
    argv = scp_argv(parse_copy(args.source, args.destination), "ns", args, [])
    assert argv[:2] == ["scp", "-o"] and shlex.split(argv[2])[-3:] == ["--stdio=true", "vm/web/ns", "2222"]
    assert argv[3:] == ["-i", "/id", "-r", "-p", "d", "me@vm.web.ns:/srv"]
    # From the VM: the user in the target wins over -l; no -i, -r or -p unless asked for.
    args = build_parser().parse_args(["scp", "-l", "me", "root@vmi/web/other:f", "."])
    copy = parse_copy(args.source, args.destination)
    assert scp_argv(copy, copy.target.namespace, args, [])[3:] == ["root@vmi.web.other:f", "."]


def _expose_args(**flags: Any) -> argparse.Namespace:
    argv = ["expose", "vm", "web", "--name", "web-svc"] + [f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]
    return build_parser().parse_args(argv)


VM = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "web", "uid": "u-1"}}


def test_expose_builds_upstreams_service() -> None:
    service = service_manifest(_expose_args(port=8080, target_port=80), "ns", VM, {"vmi.kubevirt.io/id": "web"}, [])
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "web-svc",
            "namespace": "ns",
            "ownerReferences": [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachine",
                    "name": "web",
                    "uid": "u-1",
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {
            "ports": [{"protocol": "TCP", "port": 8080, "targetPort": 80}],
            "selector": {"vmi.kubevirt.io/id": "web"},
            "type": "ClusterIP",
        },
    }
    named = service_manifest(
        _expose_args(port=22, target_port="ssh", port_name="s", type="nodeport", ip_family="IPv4,IPv6"),
        "ns",
        VM,
        {},
        [],
    )
    assert named["spec"]["ports"] == [{"name": "s", "protocol": "TCP", "port": 22, "targetPort": "ssh"}]
    assert named["spec"]["type"] == "NodePort"
    assert named["spec"]["ipFamilies"] == ["IPv4", "IPv6"] and named["spec"]["ipFamilyPolicy"] == "PreferDualStack"


def test_expose_reuses_the_pod_network_ports_or_refuses() -> None:
    spec = {
        "networks": [{"name": "blue", "multus": {"networkName": "b"}}, {"name": "default", "pod": {}}],
        "domain": {
            "devices": {"interfaces": [{"name": "default", "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}]}
        },
    }
    ports = pod_network_ports(spec)
    assert ports == [
        {"name": "port-1", "protocol": "", "port": 80},
        {"name": "port-2", "protocol": "UDP", "port": 53},
    ]
    service = service_manifest(_expose_args(), "ns", VM, {}, ports)
    assert service["spec"]["ports"] == [
        {"name": "port-1", "port": 80},
        {"name": "port-2", "protocol": "UDP", "port": 53},
    ]
    with pytest.raises(VirtctlError, match="couldn't find port via --port flag or introspection"):
        service_manifest(_expose_args(), "ns", VM, {}, [])
    for flags, message in (
        ({"type": "ExternalName", "port": 1}, "type: ExternalName not supported"),
        ({"type": "weird", "port": 1}, "unknown service type: weird"),
        ({"protocol": "sctp", "port": 1}, "unknown protocol: sctp"),
        ({"ip_family": "IPv5", "port": 1}, "unknown IPFamily/s: IPv5"),
    ):
        with pytest.raises(VirtctlError) as caught:
            service_manifest(_expose_args(**flags), "ns", VM, {}, [])
        assert str(caught.value) == message


# ------------------------------------------------------------------------------------------------ virt-api


def test_portforward_path_parameters() -> None:
    assert parse_target(["22"]) == Target(22, "tcp")
    assert parse_target(["80", "TCP"]) == Target(80, "tcp")
    assert parse_target(["53", "udp"]) == Target(53, "udp")
    for extra, code in (
        (["abc"], 400),
        (["0"], 400),
        (["70000"], 400),
        ([""], 400),
        (["1", "udp", "x"], 404),
        (["53", "sctp"], 400),
    ):
        with pytest.raises(errors.APIError) as caught:
            parse_target(extra)
        assert caught.value.code == code


def test_portforward_vmi_checks() -> None:
    vmi: dict[str, Any] = {"metadata": {"name": "v"}, "status": {"interfaces": [{"ipAddress": "fd00::5"}]}}
    assert target_address(vmi) == "fd00::5" and host_port("fd00::5", 22) == "[fd00::5]:22"
    assert host_port("10.0.0.1", 22) == "10.0.0.1:22"
    assert check_port_forward(vmi) is None
    paused = {**vmi, "status": {"conditions": [{"type": "Paused", "status": "True"}]}}
    problem = check_port_forward(paused)
    assert problem is not None and problem.code == 409 and problem.message.endswith("VMI is paused")
    with pytest.raises(errors.APIError, match="no network interfaces are present"):
        target_address({"status": {"interfaces": []}})
