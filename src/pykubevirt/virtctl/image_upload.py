"""`virtctl image-upload (dv|pvc) NAME` (pkg/virtctl/imageupload/imageupload.go): find or create the upload
DataVolume or claim, wait for its upload server, get an upload token and POST the image to the upload proxy.

The proxy is `--uploadproxy-url`, else the API server itself (the embedded cluster serves CDI's proxy paths on its
own port). On a terminal the transfer shows a progress bar; otherwise one plain line per 10 %.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import posixpath
import random
import ssl
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, BinaryIO, TextIO
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from pykubevirt.client.api import JSON_PATCH, KubeClient
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import (
    DATA_SOURCES,
    DATA_VOLUMES,
    EVENTS,
    PERSISTENT_VOLUME_CLAIMS,
    STORAGE_CLASSES,
)
from pykubevirt.virtctl.client import VirtctlError, error_message
from pykubevirt.virtctl.image_upload_args import (
    UPLOAD_TARGET,
    UploadOptions,
    check_access_mode,
    check_flag_values,
    data_source_manifest,
    data_source_patch,
    data_volume_manifest,
    deprecation_lines,
    parse_options,
    pvc_manifest,
    storage_spec,
)

POLL_SECONDS = 2.0
PROCESSING_WAIT_SECONDS = 24 * 3600.0
CHUNK = 1 << 20
TOKEN_PATH = "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/{namespace}/uploadtokenrequests"
UPLOAD_PATH = "/v1beta1/upload"
UPLOAD_ASYNC_PATH = "/v1beta1/upload-async"
POD_PHASE = "cdi.kubevirt.io/storage.pod.phase"
POD_READY = "cdi.kubevirt.io/storage.pod.ready"
DELETE_AFTER_COMPLETION = "cdi.kubevirt.io/storage.deleteAfterCompletion"
USE_POPULATOR = "cdi.kubevirt.io/storage.usePopulator"
PVC_PRIME = "cdi.kubevirt.io/storage.populator.pvcPrime"
OPTIMISTIC_LOCK = "the object has been modified; please apply your changes to the latest version and try again"
DEADLINE_EXCEEDED = "context deadline exceeded"  # what virtwait.PollImmediately returns on its timeout
MAX_TOKEN_REFRESHES = 3
BAR_WIDTH = 40
PROCESSING = (
    "Uploading data completed successfully, waiting for processing to complete, "
    "you can hit ctrl-c without interrupting the progress"
)
PROCESSING_TIMED_OUT = (
    "Timed out waiting for post upload processing to complete, please check upload pod status for progress"
)


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

    def reset(self) -> None:
        """Back to zero for a retried transfer (pb's SetCurrent(0))."""
        self.sent = 0
        self.started = time.monotonic()
        self._last_decile = -1

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


def open_error(path: str, exc: OSError) -> str:
    """Go's os.Open error text (`open PATH: no such file or directory`)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return f"open {path}: {reason[:1].lower()}{reason[1:]}"


def proxy_path(url: str, uri: str) -> str:
    """ConstructUploadProxyPath: the URI joined to the URL's path unless the URL holds it already."""
    if uri in url:
        return url
    parts = urlsplit(url)
    joined = posixpath.normpath("/" + "/".join(p for p in (parts.path + uri).split("/") if p))
    return urlunsplit(parts._replace(path=joined))


def _go_bool(text: str) -> bool:
    return text in ("1", "t", "T", "TRUE", "true", "True")


async def _poll(seconds: float, condition: Callable[[], Awaitable[bool]]) -> None:
    """virtwait.PollImmediately: the condition now, then every POLL_SECONDS until it holds, fails or time is up."""
    deadline = time.monotonic() + seconds
    if await condition():
        return
    while True:
        remaining = deadline - time.monotonic()
        if remaining < POLL_SECONDS:
            await asyncio.sleep(max(remaining, 0.0))
            raise VirtctlError(DEADLINE_EXCEEDED)
        await asyncio.sleep(POLL_SECONDS)
        if await condition():
            return


async def _file_chunks(image: BinaryIO, progress: Progress) -> AsyncIterator[bytes]:
    sent = 0
    while chunk := await asyncio.to_thread(image.read, CHUNK):
        sent += len(chunk)
        progress.update(sent)
        yield chunk


async def image_upload(client: KubeClient, namespace: str, args: argparse.Namespace, out: TextIO = sys.stdout) -> None:
    wait_secs, retries = check_flag_values(args)
    # cobra prints pflag's deprecation lines with cmd.Print, which virtctl's root sends to stdout.
    for line in deprecation_lines(args):
        print(line, file=out, flush=True)
    opts = parse_options(args, wait_secs, retries)
    try:
        # Opened before any cluster access and held for the whole command, as KubeVirt's is.
        image = await asyncio.to_thread(open, opts.image_path, "rb")
    except OSError as exc:
        raise VirtctlError(open_error(opts.image_path, exc)) from None
    with image:
        await Uploader(client, namespace, opts, out).run(image)


class Uploader:
    """One `image-upload` run (KubeVirt's command.run after its argument checks)."""

    def __init__(self, client: KubeClient, namespace: str, opts: UploadOptions, out: TextIO) -> None:
        self.client = client
        self.namespace = namespace
        self.opts = opts
        self.out = out

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    async def run(self, image: BinaryIO) -> None:
        opts = self.opts
        try:
            pvc: dict[str, Any] | None = await self.get_and_validate_pvc()
        except NotFound:
            if opts.no_create:
                raise
            pvc = None
        if pvc is None:
            if not opts.size:
                raise VirtctlError("when creating a resource, the size must be specified")
            created = await (self.create_pvc() if opts.create_pvc else self.create_data_volume())
            meta = created.get("metadata") or {}
            kind = "PersistentVolumeClaim" if opts.create_pvc else "DataVolume"
            self.say(f"{kind} {meta.get('namespace', self.namespace)}/{meta.get('name', opts.name)} created")
        else:
            pvc = await self.ensure_supports_upload(pvc)
            self.say(f"Using existing PVC {self.namespace}/{pvc['metadata']['name']}")
        await (self.wait_upload_server_ready() if opts.create_pvc else self.wait_dv_upload_scheduled())
        proxy = opts.uploadproxy_url or self.client.config.server
        if "://" not in proxy:
            proxy = "https://" + proxy
        self.say(f"Uploading data to {proxy}")
        token = await self.upload_token()
        await self.upload_data(proxy, token, image)
        if opts.datasource:
            await self.handle_data_source()
        self.say(PROCESSING)
        try:
            await _poll(PROCESSING_WAIT_SECONDS, self._processed)
        except (VirtctlError, ApiError, OSError):
            self.say(PROCESSING_TIMED_OUT)
            raise
        self.say(f"Uploading {opts.image_path} completed successfully")

    # ------------------------------------------------------------------------------------------ existing claim

    async def get_and_validate_pvc(self) -> dict[str, Any]:
        """getAndValidateUploadPVC: the existing claim, if it can still take an upload; NotFound when it is absent."""
        opts, ns = self.opts, self.namespace
        try:
            pvc = await self.client.get(PERSISTENT_VOLUME_CLAIMS, opts.name, ns)
        except (ApiError, OSError):
            self.say(f"PVC {ns}/{opts.name} not found ")
            raise
        if not opts.create_pvc:
            pvc = await self.validate_data_volume(pvc)
        annotations = pvc["metadata"].get("annotations") or {}
        if annotations.get(POD_PHASE) == "Succeeded":
            raise VirtctlError(f"PVC {opts.name} already successfully imported/cloned/updated")
        if not opts.no_create and UPLOAD_TARGET not in annotations:
            raise VirtctlError(f"PVC {opts.name} not available for upload")
        if opts.archive_upload and annotations.get("cdi.kubevirt.io/storage.contentType") != "archive":
            raise VirtctlError(f"PVC {opts.name} doesn't have archive contentType annotation")
        return pvc

    async def validate_data_volume(self, pvc: dict[str, Any]) -> dict[str, Any]:
        """validateUploadDataVolume: the claim has its DataVolume; with populators the upload goes to PVC prime."""
        name, ns = self.opts.name, str(pvc["metadata"].get("namespace") or self.namespace)
        annotations = pvc["metadata"].get("annotations") or {}
        try:
            dv = await self.client.get(DATA_VOLUMES, name, ns)
        except NotFound:
            if annotations.get(DELETE_AFTER_COMPLETION) == "true" and annotations.get(POD_PHASE) == "Succeeded":
                raise VirtctlError(
                    f"DataVolume already garbage-collected: Assuming PVC {ns}/{name} is successfully populated"
                ) from None
            raise VirtctlError(f"No DataVolume is associated with the existing PVC {ns}/{name}") from None
        if ((dv.get("metadata") or {}).get("annotations") or {}).get(USE_POPULATOR) != "true":
            return pvc
        if (pvc.get("status") or {}).get("phase") == "Bound":
            raise VirtctlError(f"PVC {name} already successfully populated")
        prime = annotations.get(PVC_PRIME)
        if prime is None:
            raise VirtctlError(f"Unable to get PVC Prime name from PVC {ns}/{name}")
        try:
            return await self.client.get(PERSISTENT_VOLUME_CLAIMS, str(prime), ns)
        except (ApiError, OSError):
            raise VirtctlError(f"Unable to get PVC Prime {ns}/{name}") from None

    async def ensure_supports_upload(self, pvc: dict[str, Any]) -> dict[str, Any]:
        """ensurePVCSupportsUpload: mark a claim used with --no-create as an upload target."""
        annotations = pvc["metadata"].get("annotations") or {}
        if UPLOAD_TARGET in annotations:
            return pvc
        pvc["metadata"]["annotations"] = {**annotations, UPLOAD_TARGET: ""}
        return await self.client.update(PERSISTENT_VOLUME_CLAIMS, pvc)

    # ------------------------------------------------------------------------------------------------ creation

    async def _check_storage_class(self) -> None:
        # KubeVirt looks the class up first, so a typo fails with the API's not-found text and nothing is created.
        if self.opts.storage_class:
            await self.client.get(STORAGE_CLASSES, self.opts.storage_class)

    async def create_pvc(self) -> dict[str, Any]:
        check_access_mode(self.opts)
        await self._check_storage_class()
        manifest = pvc_manifest(self.opts, self.namespace)
        return await self.client.create(PERSISTENT_VOLUME_CLAIMS, manifest, self.namespace)

    async def create_data_volume(self) -> dict[str, Any]:
        storage = storage_spec(self.opts)
        await self._check_storage_class()
        manifest = data_volume_manifest(self.opts, self.namespace, storage)
        return await self.client.create(DATA_VOLUMES, manifest, self.namespace)

    # ----------------------------------------------------------------------------------------------- waiting

    async def wait_dv_upload_scheduled(self) -> None:
        """waitDvUploadScheduled: the DataVolume reaches UploadReady (refused while it waits for a consumer)."""

        async def state() -> tuple[bool, str] | None:
            name = self.opts.name
            try:
                dv = await self.client.get(DATA_VOLUMES, name, self.namespace)
            except NotFound:
                self.say(f"DV {name} not found... ")
                return None
            status = dv.get("status") or {}
            phase = str(status.get("phase") or "")
            if phase in ("WaitForFirstConsumer", "PendingPopulation") and not self.opts.force_bind:
                raise VirtctlError(
                    f"cannot upload to DataVolume in {phase} phase, make sure the PVC is Bound, or use force-bind flag"
                )
            return phase == "UploadReady", str(status.get("claimName") or "")

        await self._wait_for_upload_pod(state)

    async def wait_upload_server_ready(self) -> None:
        """waitUploadServerReady: the claim's pod.ready annotation, for an upload straight to a claim."""

        async def state() -> tuple[bool, str] | None:
            name = self.opts.name
            pvc = await self.client.get_or_none(PERSISTENT_VOLUME_CLAIMS, name, self.namespace)
            if pvc is None:
                return None
            return _go_bool(str((pvc["metadata"].get("annotations") or {}).get(POD_READY, ""))), name

        await self._wait_for_upload_pod(state)

    async def _wait_for_upload_pod(self, state: Callable[[], Awaitable[tuple[bool, str] | None]]) -> None:
        """Poll `state` (ready, and the claim whose events may end the wait; None while the object is missing),
        saying once that it waits and, then, when the pod is ready."""
        logged = False

        async def ready() -> bool:
            nonlocal logged
            found = await state()
            if found is None:
                return False
            done, claim = found
            if not done:
                await self.handle_event_errors(claim, self.opts.name)
                if not logged:
                    self.say(f"Waiting for PVC {self.opts.name} upload pod to be ready...")
                    logged = True
            elif logged:
                self.say("Pod now ready")
            return done

        await _poll(self.opts.wait_secs, ready)

    async def _uid(self, resource: Any, name: str) -> str:
        if not name:
            return ""
        try:
            return str((await self.client.get(resource, name, self.namespace))["metadata"].get("uid") or "")
        except NotFound:
            return ""

    async def handle_event_errors(self, pvc_name: str, dv_name: str) -> None:
        """handleEventErrors: a ProvisioningFailed claim or ErrClaimNotValid DataVolume event ends the wait."""
        events = (await self.client.list(EVENTS, self.namespace)).get("items") or []
        pvc_uid = await self._uid(PERSISTENT_VOLUME_CLAIMS, pvc_name)
        dv_uid = await self._uid(DATA_VOLUMES, dv_name)
        for event in events:
            involved = event.get("involvedObject") or {}
            kind, uid = involved.get("kind"), str(involved.get("uid") or "")
            reason, message = event.get("reason"), str(event.get("message") or "")
            if kind == "PersistentVolumeClaim" and uid == pvc_uid and reason == "ProvisioningFailed":
                # A conflict on the claim is the provisioner retrying, not a failure.
                if OPTIMISTIC_LOCK not in message:
                    raise VirtctlError(f"Provisioning failed: {message}")
            if kind == "DataVolume" and uid == dv_uid and reason == "ErrClaimNotValid":
                raise VirtctlError(f"Claim not valid: {message}")

    async def _processed(self) -> bool:
        pvc = await self.client.get(PERSISTENT_VOLUME_CLAIMS, self.opts.name, self.namespace)
        if (pvc["metadata"].get("annotations") or {}).get(POD_PHASE) == "Succeeded":
            self.say("Processing completed successfully")
            return True
        return False

    # ------------------------------------------------------------------------------------------------ upload

    async def upload_token(self) -> str:
        request = {
            "apiVersion": "upload.cdi.kubevirt.io/v1beta1",
            "kind": "UploadTokenRequest",
            "metadata": {"generateName": "token-for-virtctl-"},
            "spec": {"pvcName": self.opts.name},
        }
        answer = await self.client.request("POST", TOKEN_PATH.format(namespace=self.namespace), body=request)
        return str(((answer or {}).get("status") or {}).get("token") or "")

    def _ssl(self) -> ssl.SSLContext | bool:
        """The kubeconfig's CA (the embedded proxy has the API server's certificate), or no checks with --insecure."""
        return False if self.opts.insecure else self.client.config.ssl_context()

    async def _upload_url(self, session: aiohttp.ClientSession, proxy: str, token: str) -> str:
        """ConstructUploadProxyPathAsync: the async endpoint if a HEAD to it answers 200, else the synchronous one."""
        url = proxy_path(proxy, UPLOAD_ASYNC_PATH)
        try:
            headers = {"Authorization": f"Bearer {token}"}
            async with session.head(url, headers=headers, ssl=self._ssl()) as answer:
                if answer.status == 200:
                    return url
        except (aiohttp.ClientError, OSError):
            pass
        return proxy_path(proxy, UPLOAD_PATH)

    async def _post(
        self, session: aiohttp.ClientSession, url: str, token: str, image: BinaryIO, size: int, progress: Progress
    ) -> tuple[int, str | None]:
        """One attempt: (HTTP status or 0, the error text or None)."""
        await asyncio.to_thread(image.seek, 0)
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/octet-stream",
            "Content-Length": str(size),
        }
        try:
            async with session.post(
                url, data=_file_chunks(image, progress), headers=headers, ssl=self._ssl()
            ) as answer:
                body = await answer.text()
                if answer.status != 200:
                    return answer.status, f"unexpected return value {answer.status}, {body}"
                return answer.status, None
        except (aiohttp.ClientError, OSError) as exc:
            return 0, f'Post "{url}": {exc}'

    async def upload_data(self, proxy: str, token: str, image: BinaryIO) -> None:
        """uploadData: POST the image, again after any failure up to --retry attempts; a 401 refreshes the token."""
        size = os.fstat(image.fileno()).st_size
        progress = Progress(size, self.out)
        self.say("")
        error: str | None = None
        attempt, refreshes = 0, MAX_TOKEN_REFRESHES
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while attempt < self.opts.retries:
                url = await self._upload_url(session, proxy, token)
                if attempt > 0:
                    progress.reset()
                    await asyncio.sleep(attempt * random.randrange(50) / 1000)
                code, failure = await self._post(session, url, token, image, size, progress)
                if failure is None:
                    break
                error = failure
                if code == 401:
                    # A 401 on the first attempt is bad credentials, not an expired token.
                    if attempt == 0 or refreshes == 0:
                        raise VirtctlError(f"authentication failed: {failure}")
                    try:
                        token = await self.upload_token()
                    except (ApiError, OSError) as exc:
                        raise VirtctlError(f"failed to get upload token: {error_message(exc)}") from exc
                    refreshes -= 1
                attempt += 1
        progress.finish()
        self.say("")
        if error is not None and attempt == self.opts.retries:
            raise VirtctlError(f"error uploading image after {self.opts.retries} retries: {error}")

    # ------------------------------------------------------------------------------------------- data source

    async def handle_data_source(self) -> None:
        """handleDataSource: a DataSource of the claim's name pointing to it, created or updated."""
        name, ns = self.opts.name, self.namespace
        try:
            existing = await self.client.get(DATA_SOURCES, name, ns)
        except NotFound:
            await self.client.create(DATA_SOURCES, data_source_manifest(self.opts, ns), ns)
            self.say(f"Created a new DataSource {ns}/{name}")
            return
        ds_ns = str(existing["metadata"].get("namespace") or ns)
        patch = data_source_patch(self.opts, ns, existing)
        await self.client.patch(DATA_SOURCES, name, patch, ds_ns, patch_type=JSON_PATCH)
        self.say(f"Updated an existing DataSource {ds_ns}/{name}")
