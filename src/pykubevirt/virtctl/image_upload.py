"""`virtctl image-upload (dv|pvc) NAME` (pkg/virtctl/imageupload/imageupload.go): create an upload DataVolume,
wait for its upload server, get an upload token and POST the image to the upload proxy.

The proxy is `--uploadproxy-url`, else the API server itself (the embedded cluster serves CDI's proxy paths on its
own port). On a terminal the transfer shows a progress bar; otherwise one plain line per 10 %.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, TextIO

import aiohttp

from pykubevirt.api.volume_binding import to_bytes
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import AlreadyExists, NotFound
from pykubevirt.client.resources import DATA_VOLUMES, PERSISTENT_VOLUME_CLAIMS
from pykubevirt.virtctl.client import VirtctlError

POLL_SECONDS = 2.0
CHUNK = 1 << 20
TOKEN_PATH = "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/{namespace}/uploadtokenrequests"
UPLOAD_PATH = "/v1beta1/upload"
POD_PHASE = "cdi.kubevirt.io/storage.pod.phase"
POD_READY = "cdi.kubevirt.io/storage.pod.ready"
BAR_WIDTH = 40


def add_arguments(command: Any) -> None:
    upload = command("image-upload", "Upload a VM image to a DataVolume/PersistentVolumeClaim.", "kind", "name")
    upload.add_argument("--image-path", required=True, help="path to the local VM image")
    upload.add_argument("--size", default="", help="the size of the DataVolume to create (ex. 10Gi, 500Mi)")
    upload.add_argument("--storage-class", default="", help="the storage class for the PVC")
    upload.add_argument("--access-mode", default="", help="the access mode for the PVC")
    upload.add_argument("--volume-mode", default="", help="the volume mode for the PVC (block or filesystem)")
    upload.add_argument("--uploadproxy-url", default="", help="the URL of the cdi-upload proxy service")
    upload.add_argument("--insecure", action="store_true", help="allow insecure server connections over HTTPS")
    upload.add_argument("--no-create", action="store_true", help="don't create the DataVolume, use an existing one")
    upload.add_argument("--wait-secs", type=int, default=300, help="seconds to wait for the upload pod")
    upload.add_argument("--force-bind", action="store_true", help="bind the PVC at once (WaitForFirstConsumer)")


def _data_volume(name: str, args: argparse.Namespace) -> dict[str, Any]:
    storage: dict[str, Any] = {"resources": {"requests": {"storage": args.size}}}
    if args.storage_class:
        storage["storageClassName"] = args.storage_class
    if args.access_mode:
        storage["accessModes"] = [args.access_mode]
    if args.volume_mode:
        storage["volumeMode"] = "Block" if args.volume_mode.lower() == "block" else "Filesystem"
    meta: dict[str, Any] = {"name": name}
    if args.force_bind:
        meta["annotations"] = {"cdi.kubevirt.io/storage.bind.immediate.requested": ""}
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": meta,
        "spec": {"source": {"upload": {}}, "storage": storage},
    }


async def _wait_ready(client: KubeClient, namespace: str, name: str, wait_secs: int, out: TextIO) -> None:
    deadline = time.monotonic() + wait_secs
    print(f"Waiting for PVC {name} upload pod to be ready...", file=out, flush=True)
    while True:
        try:
            pvc = await client.get(PERSISTENT_VOLUME_CLAIMS, name, namespace)
        except NotFound:
            pvc = None
        annotations = ((pvc or {}).get("metadata") or {}).get("annotations") or {}
        if annotations.get(POD_PHASE) == "Succeeded":
            raise VirtctlError(f"PVC {name} already successfully imported/cloned/updated")
        if annotations.get(POD_READY) == "true":
            print("Pod now ready", file=out, flush=True)
            return
        if time.monotonic() >= deadline:
            raise VirtctlError(f"timed out waiting for PVC {namespace}/{name} upload pod to be ready")
        await asyncio.sleep(POLL_SECONDS)


class Progress:
    """A bar redrawn in place on a terminal (as cheggaaa/pb's Full template), plain lines every 10 % otherwise."""

    def __init__(self, total: int, out: TextIO) -> None:
        self.total = max(total, 1)
        self.out = out
        self.tty = out.isatty()
        self.sent = 0
        self.started = time.monotonic()
        self._last_decile = -1
        self._last_draw = 0.0

    @staticmethod
    def _human(n: float) -> str:
        for unit in ("B", "KiB", "MiB", "GiB"):
            if n < 1024 or unit == "GiB":
                return f"{n:.2f} {unit}" if unit != "B" else f"{int(n)} B"
            n /= 1024
        return f"{n:.2f} GiB"

    def update(self, sent: int) -> None:
        self.sent = sent
        fraction = sent / self.total
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw < 0.1 and sent < self.total:
                return
            self._last_draw = now
            elapsed = max(now - self.started, 1e-6)
            speed = sent / elapsed
            eta = (self.total - sent) / speed if speed else 0
            filled = int(BAR_WIDTH * fraction)
            bar = "=" * max(filled - 1, 0) + (">" if filled < BAR_WIDTH else "=") + "-" * (BAR_WIDTH - filled)
            line = (
                f"\r {self._human(sent)} / {self._human(self.total)} [{bar[:BAR_WIDTH]}] {fraction * 100:.2f}% "
                f"{self._human(speed)}/s {int(eta)}s"
            )
            self.out.write(line)
            self.out.flush()
            return
        decile = int(fraction * 10)
        if decile != self._last_decile:
            self._last_decile = decile
            print(f"{self._human(sent)} / {self._human(self.total)} ({fraction * 100:.0f}%)", file=self.out, flush=True)

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


async def _file_chunks(path: str, progress: Progress) -> AsyncIterator[bytes]:
    sent = 0
    image = await asyncio.to_thread(open, path, "rb")
    try:
        while chunk := await asyncio.to_thread(image.read, CHUNK):
            sent += len(chunk)
            progress.update(sent)
            yield chunk
    finally:
        image.close()


def _ssl_context(client: KubeClient, insecure: bool) -> ssl.SSLContext | bool:
    """The kubeconfig's CA (the embedded proxy has the API server's certificate), or no checks with --insecure."""
    return False if insecure else client.config.ssl_context()


async def _upload(client: KubeClient, url: str, token: str, path: str, insecure: bool, out: TextIO) -> None:
    size = os.path.getsize(path)
    progress = Progress(size, out)
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/octet-stream",
        "Content-Length": str(size),
    }
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(
            url + UPLOAD_PATH, data=_file_chunks(path, progress), headers=headers, ssl=_ssl_context(client, insecure)
        ) as answer,
    ):
        text = await answer.text()
    progress.finish()
    if answer.status != 200:
        raise VirtctlError(f"unexpected return value {answer.status}, {text.strip()}")


async def image_upload(client: KubeClient, namespace: str, args: argparse.Namespace, out: TextIO = sys.stdout) -> None:
    if args.kind not in ("dv", "pvc"):
        raise VirtctlError(f'unknown resource type "{args.kind}": use dv or pvc')
    name = args.name
    if not os.path.isfile(args.image_path):
        raise VirtctlError(f"failed to access file {args.image_path}")
    if args.no_create:
        try:
            await client.get(PERSISTENT_VOLUME_CLAIMS, name, namespace)
        except NotFound:
            raise VirtctlError(f'persistentvolumeclaims "{name}" not found') from None
        print(f"Using existing PVC {namespace}/{name}", file=out, flush=True)
    else:
        if not args.size:
            raise VirtctlError("when creating a resource, the size must be specified")
        to_bytes(args.size)
        try:
            await client.create(DATA_VOLUMES, _data_volume(name, args), namespace)
        except AlreadyExists:
            raise VirtctlError(f"DataVolume {namespace}/{name} already exists") from None
        print(f"DataVolume {namespace}/{name} created", file=out, flush=True)
    await _wait_ready(client, namespace, name, args.wait_secs, out)
    proxy = args.uploadproxy_url or client.config.server
    if "://" not in proxy:
        proxy = "https://" + proxy
    proxy = proxy.rstrip("/")
    print(f"Uploading data to {proxy}", file=out, flush=True)
    request = {
        "apiVersion": "upload.cdi.kubevirt.io/v1beta1",
        "kind": "UploadTokenRequest",
        "metadata": {"generateName": "token-for-virtctl-", "namespace": namespace},
        "spec": {"pvcName": name},
    }
    answer = await client.request("POST", TOKEN_PATH.format(namespace=namespace), body=request)
    token = str(((answer or {}).get("status") or {}).get("token") or "")
    if not token:
        raise VirtctlError("no token returned")
    await _upload(client, proxy, token, args.image_path, args.insecure, out)
    print(
        "Uploading data completed successfully, waiting for processing to complete, "
        "you can hit ctrl-c without interrupting the progress",
        file=out,
        flush=True,
    )
    deadline = time.monotonic() + args.wait_secs
    while True:
        pvc = await client.get(PERSISTENT_VOLUME_CLAIMS, name, namespace)
        if (pvc["metadata"].get("annotations") or {}).get(POD_PHASE) == "Succeeded":
            break
        if time.monotonic() >= deadline:
            raise VirtctlError(f"timed out waiting for PVC {namespace}/{name} to be processed")
        await asyncio.sleep(POLL_SECONDS)
    print("Processing completed successfully", file=out, flush=True)
    print(f"Uploading {args.image_path} completed successfully", file=out, flush=True)
