"""`virtctl vmexport create|delete|download NAME` (pkg/virtctl/vmexport/vmexport.go): make or remove a
VirtualMachineExport, or download a volume (or the VM's manifests) from its link once it is Ready.

The link is the export's status.links.external, which this cluster's API server serves itself; its certificate
(links.external.cert) is the API server's CA. The token is the `token` key of the Secret status.tokenSecretRef names,
sent in the `x-kubevirt-export-token` header.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import secrets
import ssl
import sys
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, BinaryIO, TextIO
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from pykubevirt.api.constants import EXPORT_API_VERSION, VM_EXPORT_KIND
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import AlreadyExists, NotFound
from pykubevirt.client.resources import SECRETS, VM_EXPORTS
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.image_upload import DEADLINE_EXCEEDED
from pykubevirt.virtctl.vmexport_args import CREATE, DELETE, OUTPUT_FORMAT_JSON, VMExportInfo, check_args

TOKEN_HEADER = "x-kubevirt-export-token"
TOKEN_KEY = "token"
TOKEN_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
TOKEN_LENGTH = 20
FORMAT_RAW, FORMAT_GZIP, FORMAT_ARCHIVE = "raw", "gzip", "tar.gz"
MANIFEST_ALL, MANIFEST_AUTH_HEADER = "all", "auth-header-secret"
APPLICATION_YAML, APPLICATION_JSON = "application/yaml", "application/json"
WAIT_INTERVAL = 2.0
RETRY_SECONDS = 2.0
CHUNK = 1 << 20
REFRESH_SECONDS = 0.2
# KubeVirt's bar has no total to fill, only this cycle.
PROGRESS_CYCLE = ("[___________________]", *(f"[{'=' * 2 * i}>{'_' * (18 - 2 * i)}]" for i in range(1, 10)))
RETRIES_EXHAUSTED = "retry count reached, exiting unsuccessfully"


class ExportExists(VirtctlError):
    """`create` found the export already there; a download then uses it and leaves it in place."""


def secret_name(export_name: str) -> str:
    return f"secret-{export_name}"


def _where(export: dict[str, Any], info: VMExportInfo) -> str:
    meta = export.get("metadata") or {}
    return f"'{meta.get('namespace') or info.namespace}/{meta.get('name') or info.name}' VirtualMachineExport"


# ------------------------------------------------------------------------------------------- links in the status


def _links(export: dict[str, Any], service_url: str) -> dict[str, Any] | None:
    """The external links, or the internal ones with --service-url (or when there are no external ones)."""
    links = (export.get("status") or {}).get("links")
    if links is None:
        return None
    if not service_url and links.get("external") is not None:
        return dict(links["external"])
    internal = links.get("internal")
    return None if internal is None else dict(internal)


def with_service_url(url: str, service_url: str) -> str:
    """replaceUrlWithServiceUrl: the URL with its host replaced by --service-url, when given."""
    return urlunsplit(urlsplit(url)._replace(netloc=service_url)) if service_url else url


def volume_url(export: dict[str, Any], info: VMExportInfo) -> tuple[str, str]:
    """GetUrlFromVirtualMachineExport: the volume's (URL, format), a gzip or tar.gz link before a raw one."""
    links = _links(export, info.service_url)
    volumes = list((links or {}).get("volumes") or [])
    if not volumes:
        raise VirtctlError(f"unable to access the volume info from {_where(export, info)}")
    if len(volumes) > 1 and not info.volume_name:
        raise VirtctlError(
            f"detected more than one downloadable volume in {_where(export, info)}: "
            "Select the expected volume using the --volume flag"
        )
    url, chosen = "", ""
    for volume in volumes:
        if len(volumes) > 1 and volume.get("name") != info.volume_name:
            continue
        for link in volume.get("formats") or []:
            kind = link.get("format")
            if kind in (FORMAT_GZIP, FORMAT_ARCHIVE, FORMAT_RAW):
                url, chosen = with_service_url(str(link.get("url") or ""), info.service_url), str(kind)
            if kind in (FORMAT_GZIP, FORMAT_ARCHIVE):
                break
    if not url:
        raise VirtctlError(f"unable to get a valid URL from {_where(export, info)}")
    return url, chosen


def manifest_urls(export: dict[str, Any], info: VMExportInfo) -> dict[str, str]:
    """GetManifestUrlsFromVirtualMachineExport: URL by manifest type (all, auth-header-secret)."""
    links = (export.get("status") or {}).get("links") or {}
    link = links.get("internal" if info.service_url else "external") or {}
    manifests = list(link.get("manifests") or [])
    if not manifests:
        raise VirtctlError(f"unable to access the manifest info from {_where(export, info)}")
    return {str(m.get("type")): with_service_url(str(m.get("url") or ""), info.service_url) for m in manifests}


def link_cert(export: dict[str, Any], service_url: str) -> str:
    """The CA of the link used: the external one's, or the internal one's with --service-url."""
    links = (export.get("status") or {}).get("links") or {}
    return str((links.get("internal" if service_url else "external") or {}).get("cert") or "")


def should_delete(info: VMExportInfo) -> bool:
    """shouldDeleteVMExport: an export made by this download goes with it, unless kept; --delete-vme always."""
    return not info.export_manifest and (info.delete_vme or (info.should_create and not info.keep_vme))


# ------------------------------------------------------------------------------------------- what is created


def new_token() -> str:
    return "".join(secrets.choice(TOKEN_ALPHABET) for _ in range(TOKEN_LENGTH))


def export_manifest(info: VMExportInfo) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": info.name, "namespace": info.namespace}
    if info.labels:
        meta["labels"] = dict(info.labels)
    if info.annotations:
        meta["annotations"] = dict(info.annotations)
    spec: dict[str, Any] = {"tokenSecretRef": secret_name(info.name), "source": dict(info.source)}
    if info.ttl:
        spec["ttlDuration"] = info.ttl
    return {"apiVersion": EXPORT_API_VERSION, "kind": VM_EXPORT_KIND, "metadata": meta, "spec": spec}


def token_secret_manifest(export: dict[str, Any], token: str) -> dict[str, Any]:
    """The token Secret, owned by the export; blockOwnerDeletion false needs no right on the export's finalizers."""
    meta = export.get("metadata") or {}
    owner = {
        "apiVersion": EXPORT_API_VERSION,
        "kind": VM_EXPORT_KIND,
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": False,
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(str(meta.get("name", ""))),
            "namespace": meta.get("namespace"),
            "ownerReferences": [owner],
        },
        "type": "Opaque",
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


# --------------------------------------------------------------------------------------------------- the API


async def create(client: KubeClient, info: VMExportInfo) -> None:
    """CreateVirtualMachineExport: the export (refused if it exists), then its token Secret if not there yet."""
    where = f"'{info.namespace}/{info.name}'"
    if await client.get_or_none(VM_EXPORTS, info.name, info.namespace) is not None:
        raise ExportExists(f"VirtualMachineExport {where} already exists")
    created = await client.create(VM_EXPORTS, export_manifest(info), info.namespace)
    with contextlib.suppress(AlreadyExists):
        await client.create(SECRETS, token_secret_manifest(created, new_token()), info.namespace)
    info.say(f"VirtualMachineExport {where} created successfully")


async def delete(client: KubeClient, info: VMExportInfo) -> None:
    where = f"'{info.namespace}/{info.name}'"
    try:
        await client.delete(VM_EXPORTS, info.name, info.namespace)
    except NotFound:
        info.say(f"VirtualMachineExport {where} does not exist")
        return
    info.say(f"VirtualMachineExport {where} deleted successfully")


async def poll(interval: float, wait_seconds: float, condition: Callable[[], Awaitable[bool]]) -> None:
    """virtwait.PollImmediately: the condition now, then every `interval` until it holds, fails or time is up."""
    deadline = time.monotonic() + wait_seconds
    while not await condition():
        remaining = deadline - time.monotonic()
        if remaining < interval:
            await asyncio.sleep(max(remaining, 0.0))
            raise VirtctlError(DEADLINE_EXCEEDED)
        await asyncio.sleep(interval)


async def wait_for_export(client: KubeClient, info: VMExportInfo, interval: float, wait_seconds: float) -> None:
    """WaitForVirtualMachineExport: the export is Ready with the links the download will use."""
    which = "internal" if info.service_url else "external"

    async def ready() -> bool:
        export = await client.get_or_none(VM_EXPORTS, info.name, info.namespace)
        if export is None:
            info.say(f"couldn't get VM Export {info.name}, waiting for it to be created...")
            return False
        status = export.get("status")
        if status is None:
            return False
        if status.get("phase") != "Ready":
            info.say(f"waiting for VM Export {info.name} status to be ready...")
            return False
        if (status.get("links") or {}).get(which) is None:
            info.say(f"waiting for VM Export {info.name} {which} links to be available...")
            return False
        return True

    await poll(interval, wait_seconds, ready)


async def export_token(client: KubeClient, export: dict[str, Any], namespace: str) -> str:
    """The `token` of the Secret the export's status names (client-go's words when it names none)."""
    name = str((export.get("status") or {}).get("tokenSecretRef") or "")
    if not name:
        raise VirtctlError("resource name may not be empty")
    secret = await client.get(SECRETS, name, (export.get("metadata") or {}).get("namespace") or namespace)
    encoded = str((secret.get("data") or {}).get(TOKEN_KEY) or "")
    return base64.b64decode(encoded).decode("utf-8", "replace")


# ------------------------------------------------------------------------------------------------ the transfer


class DownloadProgress:
    """KubeVirt's bar (cheggaaa/pb, its template): `Downloading file: <bytes> <cycle> <speed> p/s` on stderr,
    redrawn in place every 0.2 s on a terminal; elsewhere only the final line, not pb's run-on redraws."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.count = 0
        self.started = self._drawn_at = time.monotonic()
        self._drawn_count = 0
        self._cycle = 0
        self._width = 0

    def _line(self, speed: float) -> str:
        cycle = PROGRESS_CYCLE[self._cycle % len(PROGRESS_CYCLE)]
        self._cycle += 1
        rate = f"{round(speed)} p/s" if speed >= 0.5 else "? p/s"
        return f"Downloading file: {self.count} {cycle} {rate}"

    def _draw(self, line: str, end: str = "") -> None:
        prefix = "\r" if self.tty else ""
        self.out.write(prefix + line.ljust(self._width) + end)
        self._width = len(line)
        self.out.flush()

    def add(self, size: int) -> None:
        self.count += size
        now = time.monotonic()
        if not self.tty or now - self._drawn_at < REFRESH_SECONDS:
            return
        speed = (self.count - self._drawn_count) / (now - self._drawn_at)
        self._drawn_at, self._drawn_count = now, self.count
        self._draw(self._line(speed))

    def finish(self) -> None:
        elapsed = time.monotonic() - self.started
        self._draw(self._line(self.count / elapsed if elapsed > 0 else 0.0), "\n")


def _gzip_error(exc: zlib.error) -> str:
    text = str(exc)
    if "header check" in text:
        return "gzip: invalid header"
    if "data check" in text or "length check" in text:
        return "gzip: invalid checksum"
    return "flate: corrupt input"


class Gunzip:
    """gzip.Reader over a stream: one member after another, with Go's texts for what is wrong."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._in_member = False
        self.started = False

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        while data:
            self.started = self._in_member = True
            try:
                out.append(self._inflate.decompress(data))
            except zlib.error as exc:
                raise VirtctlError(_gzip_error(exc)) from None
            if not self._inflate.eof:
                break
            data = self._inflate.unused_data
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            self._in_member = False
        return b"".join(out)

    def finish(self) -> None:
        if not self.started:
            raise VirtctlError("EOF")
        if self._in_member:
            raise VirtctlError("unexpected EOF")


@contextlib.asynccontextmanager
async def http_get(
    url: str, headers: dict[str, str], tls: ssl.SSLContext | bool
) -> AsyncIterator[aiohttp.ClientResponse]:
    """One GET as Go's http.Client does it (redirects followed); the body is left as it came, never decoded."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise VirtctlError(f'Get "{url}": unsupported protocol scheme "{scheme}"')
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        try:
            response = await session.get(url, headers={"Accept-Encoding": "identity", **headers}, ssl=tls)
        except (aiohttp.ClientError, OSError) as exc:
            raise VirtctlError(f'Get "{url}": {exc}') from exc
        async with response:
            yield response


def tls_for(export: dict[str, Any], info: VMExportInfo) -> ssl.SSLContext | bool:
    """Verification against the link's CA, none with --insecure; without a CA, the system's roots."""
    if info.insecure:
        return False
    cert = link_cert(export, info.service_url)
    try:
        return ssl.create_default_context(cadata=cert or None)
    except ssl.SSLError as exc:
        raise VirtctlError(f"the certificate of {_where(export, info)} cannot be used: {exc}") from exc


def _output(info: VMExportInfo) -> BinaryIO:
    return info.output if info.output is not None else sys.stdout.buffer


async def _copy(response: aiohttp.ClientResponse, info: VMExportInfo, decompress: bool) -> None:
    """copyFileWithProgressBar: the body to the output, counted as it arrives, gunzipped with --format=raw."""
    output = _output(info)
    progress = DownloadProgress(sys.stderr)
    gunzip = Gunzip() if decompress else None
    try:
        async for chunk in response.content.iter_chunked(CHUNK):
            progress.add(len(chunk))
            data = chunk
            if gunzip is not None:
                announced = gunzip.started
                data = gunzip.feed(chunk)
                if not announced:
                    info.say("Decompressing image:")
            if data:
                await asyncio.to_thread(output.write, data)
        if gunzip is not None:
            gunzip.finish()
    except aiohttp.ClientError as exc:
        raise VirtctlError(str(exc) or "unexpected EOF") from exc
    finally:
        progress.finish()
        await asyncio.to_thread(output.flush)


async def _get_and_write(
    client: KubeClient,
    export: dict[str, Any],
    info: VMExportInfo,
    url: str,
    headers: dict[str, str],
    *,
    decompress: bool | None = None,
) -> bool:
    """HandleHTTPGetRequest, then a manifest (decompress None) or a volume to the output; False after a bad HTTP
    status, the one failure KubeVirt tries again."""
    token = await export_token(client, export, info.namespace)
    tls = tls_for(export, info)
    async with http_get(url, {**headers, TOKEN_HEADER: token}, tls) as response:
        if response.status != 200:
            info.say(f"Bad status: {response.status} {response.reason or ''}".rstrip())
            return False
        if decompress is not None:
            await _copy(response, info, decompress)
            return True
        try:
            body = await response.read()
        except aiohttp.ClientError as exc:
            raise VirtctlError(str(exc) or "unexpected EOF") from exc
    await asyncio.to_thread(_output(info).write, body)
    await asyncio.to_thread(_output(info).flush)
    return True


async def _manifests(client: KubeClient, export: dict[str, Any], info: VMExportInfo) -> bool:
    """getVirtualMachineManifest: the VM's manifests (YAML or JSON), then the CDI header Secret if asked."""
    urls = manifest_urls(export, info)
    accept = APPLICATION_JSON if info.output_format == OUTPUT_FORMAT_JSON else APPLICATION_YAML
    headers = {"Accept": accept}
    if not await _get_and_write(client, export, info, urls.get(MANIFEST_ALL, ""), headers):
        return False
    if info.include_secret:
        return await _get_and_write(client, export, info, urls.get(MANIFEST_AUTH_HEADER, ""), headers)
    return True


async def _attempt(client: KubeClient, info: VMExportInfo) -> bool:
    """downloadVirtualMachineExport: True when done, False after a bad HTTP status (worth another attempt)."""
    if info.should_create:
        try:
            await create(client, info)
        except ExportExists:
            # One this command did not make stays unless --delete-vme says otherwise.
            info.keep_vme = True
    remove = should_delete(info)
    try:
        await wait_for_export(client, info, WAIT_INTERVAL, info.readiness_timeout)
        export = await client.get_or_none(VM_EXPORTS, info.name, info.namespace)
        if export is None:
            raise VirtctlError(f"unable to get '{info.namespace}/{info.name}' VirtualMachineExport")
        if info.export_manifest:
            return await _manifests(client, export, info)
        url, chosen = volume_url(export, info)
        # --format=raw gunzips a compressed link; a raw one is saved as it comes.
        decompress = info.decompress and chosen != FORMAT_RAW
        if not await _get_and_write(client, export, info, url, {}, decompress=decompress):
            return False
        info.say("Download finished successfully")
        return True
    finally:
        if remove:
            # KubeVirt defers the delete and ignores how it went.
            with contextlib.suppress(Exception):
                await delete(client, info)


async def download(client: KubeClient, info: VMExportInfo) -> None:
    """DownloadVirtualMachineExport: 1 + --retry attempts, RETRY_SECONDS apart, each after a bad HTTP status."""
    for attempt in range(info.retries + 1):
        if await _attempt(client, info):
            return
        if attempt < info.retries:
            info.say("Retrying...")
            await asyncio.sleep(RETRY_SECONDS)
    raise VirtctlError(RETRIES_EXHAUSTED)


def prepare(args: argparse.Namespace) -> None:
    """The checks KubeVirt makes before it builds its client; the output file is made here too."""
    args.export_info = check_args(args)


async def run(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    info: VMExportInfo = args.export_info
    info.namespace = namespace
    try:
        if info.function == CREATE:
            await create(client, info)
        elif info.function == DELETE:
            await delete(client, info)
        else:
            await download(client, info)
    finally:
        info.close()
