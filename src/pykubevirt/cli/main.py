"""`pykubevirt`: the command that validates manifests, prints CRDs and runs every component of the cluster."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence

from pykubevirt.cli.flags import feature_gates, listen_address
from pykubevirt.cli.startup_error import ERROR_PREFIX, StartupError, explain

Command = Callable[[argparse.Namespace], int]


def _crds(args: argparse.Namespace) -> int:
    from pykubevirt.cli.crds_command import run

    return run(args)


def _validate(args: argparse.Namespace) -> int:
    from pykubevirt.cli.validate_command import run

    return run(args)


def _apiserver(args: argparse.Namespace) -> int:
    from pykubevirt.cli.apiserver_command import run

    return run(args)


def _launcher_arguments(parser: argparse.ArgumentParser) -> None:
    from pykubevirt.launcher.arguments import add_arguments

    add_arguments(parser)


def _virt_launcher(args: argparse.Namespace) -> int:
    from pykubevirt.launcher.app import run

    return run(args)


def _cdi_importer(args: argparse.Namespace) -> int:
    from pykubevirt.storage.importer import run

    return run()


def _cdi_uploadserver(args: argparse.Namespace) -> int:
    from pykubevirt.storage.upload_server import run

    return run()


def _cdi_clone_source(args: argparse.Namespace) -> int:
    from pykubevirt.storage.clone_source import run

    return run()


def _virt_exportserver(args: argparse.Namespace) -> int:
    from pykubevirt.storage.export_server import run

    return run()


# The pods' commands, whose parsers this module defines: when one of them runs, the control-plane commands' modules
# (aiohttp, cryptography: half a second of imports) are not loaded, as an importer pod's start is on its
# DataVolume's critical path and a launcher's on its VM's.
POD_COMMANDS = frozenset({"cdi-importer", "cdi-uploadserver", "cdi-clone-source", "virt-exportserver", "virt-launcher"})


@functools.cache
def pod_parser() -> argparse.ArgumentParser:
    """The pods' commands' parser, built once: a node's fork server builds it for every container it forks (argparse
    takes ~7 ms, most of it looking for translations of each help string on disk)."""
    return build_parser(pod_command=True)


def build_parser(*, pod_command: bool = False) -> argparse.ArgumentParser:
    """Every command's parser; with `pod_command`, only the pods' commands."""
    parser = argparse.ArgumentParser(prog="pykubevirt", description="KubeVirt's VM lifecycle, in Python.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    if not pod_command:
        _add_cluster_commands(sub)
    _add_pod_commands(sub)
    return parser


def _add_cluster_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:

    crds = sub.add_parser("crds", help="print the CustomResourceDefinitions generated from the API model")
    crds.add_argument("--output-dir", help="write one file per CRD into this directory instead of printing")
    crds.set_defaults(func=_crds)

    validate = sub.add_parser("validate", help="apply KubeVirt's defaults and validation to manifests")
    validate.add_argument("-f", "--filename", action="append", required=True, help="file, directory or '-'")
    validate.add_argument("-o", "--output", choices=("yaml", "json", "none"), default="yaml")
    validate.add_argument(
        "--feature-gates",
        type=feature_gates,
        default="",
        help="comma-separated KubeVirt feature gates to enable (as in the KubeVirt CR)",
    )
    validate.set_defaults(func=_validate)

    apiserver = sub.add_parser("apiserver", help="run the embedded Kubernetes-compatible API server")
    apiserver.add_argument("--data-dir", required=True, help="directory for the database, certificates and kubeconfig")
    apiserver.add_argument(
        "--listen", type=listen_address, default="127.0.0.1:6443", help="HOST:PORT to serve HTTPS on (port 0 picks one)"
    )
    apiserver.add_argument(
        "--feature-gates", type=feature_gates, default="", help="comma-separated KubeVirt feature gates to enable"
    )
    apiserver.add_argument(
        "--history-revisions", type=int, default=100_000, help="revisions kept for watches to resume from"
    )
    apiserver.add_argument("--compact-interval", type=float, default=300.0, help="seconds between compactions")
    apiserver.add_argument("--event-ttl", type=int, default=3600, help="seconds an Event is kept after its last write")
    apiserver.add_argument(
        "--terminated-pod-gc-threshold",
        type=int,
        default=12_500,
        help="finished pods kept before the oldest are deleted (kube-controller-manager's flag; 0 keeps all)",
    )
    apiserver.add_argument(
        "--pod-gc-period", type=float, default=20.0, help="seconds between the pod garbage collector's passes"
    )
    apiserver.add_argument(
        "--pod-gc-quarantine",
        type=float,
        default=40.0,
        help="seconds a node must stay missing before the pods bound to it are deleted",
    )
    apiserver.add_argument(
        "--service-cluster-ip-range",
        default="10.0.0.0/24",
        help="the IPv4 CIDR Services get their ClusterIPs from (kube-apiserver's flag and default)",
    )
    apiserver.add_argument(
        "--unsafe-no-fsync",
        action="store_true",
        help="commit each write without waiting for fsync, as etcd's flag of that name (benchmarks only)",
    )
    apiserver.add_argument(
        "--plain",
        action="store_true",
        help="serve only what kube-apiserver serves: no KubeVirt kinds, admission by webhook configurations, "
        "other API groups through APIServices",
    )
    apiserver.set_defaults(func=_apiserver)

    from pykubevirt.cli import (
        completion_command,
        controller_command,
        doctor_command,
        handler_command,
        image_command,
        kubeconfig_command,
        node_command,
        scheduler_command,
        up_command,
        virtapi_command,
        webconsole_command,
    )

    up_command.add_parsers(sub)
    doctor_command.add_parser(sub)
    completion_command.add_parser(sub)

    controller_command.add_parser(sub)
    scheduler_command.add_parser(sub)
    node_command.add_parser(sub)
    handler_command.add_parser(sub)
    image_command.add_parser(sub)
    kubeconfig_command.add_parser(sub)
    virtapi_command.add_parser(sub)
    webconsole_command.add_parser(sub)


def _add_pod_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    importer = sub.add_parser(
        "cdi-importer", help="fill a DataVolume's claim (the importer pod's command; reads CDI's IMPORTER_* variables)"
    )
    importer.add_argument("-v", default="1", help="log verbosity (accepted for CDI's argument)")
    importer.set_defaults(func=_cdi_importer)
    uploader = sub.add_parser(
        "cdi-uploadserver", help="take one upload into a DataVolume's claim (the upload pod's command)"
    )
    uploader.add_argument("-v", default="1", help="log verbosity (accepted for CDI's argument)")
    uploader.set_defaults(func=_cdi_uploadserver)
    cloner = sub.add_parser(
        "cdi-clone-source", help="send a claim to its clone's upload server (a cross-namespace clone's source pod)"
    )
    cloner.add_argument("-v", default="1", help="log verbosity (accepted for CDI's argument)")
    cloner.set_defaults(func=_cdi_clone_source)
    exporter = sub.add_parser(
        "virt-exportserver", help="serve a VirtualMachineExport's volumes and manifests (the exporter pod's command)"
    )
    exporter.add_argument("-v", default="1", help="log verbosity (accepted for KubeVirt's argument)")
    exporter.set_defaults(func=_virt_exportserver)

    launcher = sub.add_parser("virt-launcher", help="run virt-launcher for one VMI (the compute container's command)")
    _launcher_arguments(launcher)
    launcher.set_defaults(func=_virt_launcher)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = pod_parser() if words and words[0] in POD_COMMANDS else build_parser()
    args = parser.parse_args(words)
    func: Command = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except (StartupError, OSError, ModuleNotFoundError) as exc:
        cause = explain(exc)
        if cause is None:
            raise
        print(f"{ERROR_PREFIX}{cause}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
