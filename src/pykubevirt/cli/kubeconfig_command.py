"""`pykubevirt kubeconfig --user NAME`: a kubeconfig for a new user of the embedded cluster, optionally bound to a role.

Like `kubeadm kubeconfig user`: the credential (a bearer token in the server's token file) is minted locally by
whoever can read the cluster's data directory; the RoleBinding is then created through the API as the admin.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import sys
from pathlib import Path
from typing import Any

import yaml

from pykubevirt.apiserver import security
from pykubevirt.cli.cluster_layout import DEFAULT_DATA_DIR, ClusterLayout
from pykubevirt.client.errors import AlreadyExists, ApiError

ROLES = ("admin", "edit", "view")
RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("kubeconfig", help="mint a kubeconfig for a user, optionally bound to admin, edit or view")
    parser.add_argument("--user", required=True, help="the user name the API server will know the holder as")
    parser.add_argument("--group", action="append", default=[], help="a group of the user (repeatable)")
    parser.add_argument(
        "--namespace", default="", help="the kubeconfig's namespace, where --role is granted (created if missing)"
    )
    parser.add_argument("--role", choices=ROLES, help="bind this ClusterRole to the user (in --namespace if given)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="the cluster's data directory")
    parser.add_argument("-o", "--output", type=Path, help="write the kubeconfig here (mode 0600) instead of stdout")
    parser.set_defaults(func=run)


def binding(user: str, role: str, namespace: str) -> dict[str, Any]:
    """A RoleBinding (or, without a namespace, a ClusterRoleBinding) of ClusterRole `role` to User `user`."""
    meta: dict[str, Any] = {"name": f"{user.replace(':', '-')}-{role}"}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


async def _create_binding(admin_kubeconfig: Path, body: dict[str, Any]) -> None:
    from pykubevirt.client.api import KubeClient
    from pykubevirt.client.config import load_kubeconfig
    from pykubevirt.client.resources import NAMESPACES

    namespace = body["metadata"].get("namespace")
    path = f"/apis/{RBAC_API_VERSION}" + (f"/namespaces/{namespace}" if namespace else "")
    path += "/rolebindings" if namespace else "/clusterrolebindings"
    async with KubeClient(load_kubeconfig(admin_kubeconfig), qps=0, user_agent="pykubevirt-kubeconfig") as client:
        if namespace:
            # The user's namespace is created with the grant, so the kubeconfig works at once.
            with contextlib.suppress(AlreadyExists):
                await client.create(
                    NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
                )
        with contextlib.suppress(AlreadyExists):
            await client.request("POST", path, body=body)


def run(args: argparse.Namespace) -> int:
    layout = ClusterLayout(Path(args.data_dir).resolve())
    if not layout.kubeconfig.exists():
        print(f"no cluster in {layout.data_dir} (start it with `pykubevirt up`)", file=sys.stderr)
        return 1
    namespace = args.namespace or "default"
    if args.role:
        try:
            asyncio.run(_create_binding(layout.kubeconfig, binding(args.user, args.role, args.namespace)))
        except (ApiError, OSError) as exc:
            print(f"could not bind {args.role} to {args.user}: {exc}", file=sys.stderr)
            return 1
    if args.output:
        security.write_user_kubeconfig(layout.apiserver_dir, args.output, args.user, args.group, namespace=namespace)
        print(f"wrote {args.output}", file=sys.stderr)
        return 0
    admin = yaml.safe_load(layout.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    token = security.TokenTable(layout.apiserver_dir / "tokens.csv").ensure(args.user, args.group)
    ca_pem = base64.b64decode(cluster["certificate-authority-data"])
    document = security.kubeconfig(cluster["server"], ca_pem, token, user_name=args.user, namespace=namespace)
    sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    return 0


def write_node_kubeconfig(layout: ClusterLayout, node: str) -> Path:
    """The node agent's kubeconfig (user system:node:<node>, group system:nodes); the API server must have started."""
    return security.write_user_kubeconfig(
        layout.apiserver_dir, layout.node_kubeconfig(node), security.node_user(node), (security.NODES_GROUP,)
    )
