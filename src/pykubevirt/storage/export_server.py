"""`pykubevirt virt-exportserver`: the exporter pod's process of a VirtualMachineExport, after KubeVirt's
`cmd/virt-exportserver` and `pkg/storage/export/virt-exportserver`.

It serves the exported claims (raw, gzip, tar.gz and a directory listing) and, for VM sources, the VM's manifests and
the CDI header secret, to holders of the export's token. It listens on loopback over plain HTTP (the pod has no
network namespace and the export proxy in front of it serves TLS); the line `Export server listening on <url>` in its
log is how virt-controller learns where. At DEADLINE (the export's TTL) it exits 0.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import mimetypes
import os
import posixpath
import sys
import threading
import urllib.parse
import zlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple, cast

from pykubevirt.api import pod_layout

LISTENING = "Export server listening on "
TOKEN_HEADER = "x-kubevirt-export-token"
READINESS_PATH = "/exportready"
MANIFEST_DIR = "/manifest_data"
SECRET_NAME_PREFIX = "header-secret-"
# The controller's links put the VM manifests under /external (or /internal) and the proxy forwards that path as is.
MANIFEST_SIDES = {"": "external", "/external": "external", "/internal": "internal"}
EXCLUDED = frozenset({"lost+found"})
CHUNK = 1 << 20


class Volume(NamedTuple):
    """One exported claim: its mount point (a directory, or a Block claim's device) and the URIs it is served at."""

    path: str
    image: str
    raw_uri: str
    gzip_uri: str
    archive_uri: str
    dir_uri: str

    @property
    def claim(self) -> str:
        """The claim's name, the segment after /volumes/ in its URIs."""
        uri = self.gzip_uri or self.raw_uri or self.archive_uri or self.dir_uri
        return uri.split("/")[2] if uri.count("/") >= 3 else ""


class Export(NamedTuple):
    """What the pod's environment configures: the token, the volumes, the manifest URIs and the deadline."""

    token_file: str
    manifest_dir: str
    volumes: tuple[Volume, ...]
    vm_uri: str
    secret_uri: str
    deadline: datetime | None


def parse_deadline(text: str) -> datetime | None:
    """DEADLINE as an aware datetime (RFC 3339), None when unset."""
    if not text:
        return None
    when = datetime.fromisoformat(text.strip())
    if when.tzinfo is None:
        raise ValueError(f"invalid DEADLINE {text!r}: RFC 3339 requires a zone")
    return when


def export_from_env(environ: Mapping[str, str]) -> Export:
    """The export KubeVirt's environment variables describe, with container paths mapped to host paths."""
    mounts = pod_layout.mounts_from_env(environ)
    token_file = environ.get("TOKEN_FILE", "")
    if not token_file:
        raise ValueError("no token file set (TOKEN_FILE)")
    volumes = []
    # VOLUME10 after VOLUME9: KubeVirt sorts the names as strings, which only matters past ten volumes.
    for key in sorted((k for k in environ if k.endswith("_EXPORT_PATH")), key=lambda k: (len(k), k)):
        prefix = key.removesuffix("_EXPORT_PATH")
        path = pod_layout.host_path(environ[key], mounts)
        uris = (environ.get(f"{prefix}_EXPORT_{kind}_URI", "") for kind in ("RAW", "RAW_GZIP", "ARCHIVE", "DIR"))
        volumes.append(Volume(path, os.path.join(path, "disk.img") if os.path.isdir(path) else path, *uris))
    return Export(
        pod_layout.host_path(token_file, mounts),
        pod_layout.host_path(MANIFEST_DIR, mounts),
        tuple(volumes),
        environ.get("EXPORT_VM_DEF_URI", ""),
        environ.get("EXPORT_SECRET_DEF_URI", ""),
        parse_deadline(environ.get("DEADLINE", "")),
    )


def check_readable(path: str) -> None:
    """Raise OSError unless the volume (or each entry at its top) can be opened, as KubeVirt checks at start."""
    if not os.path.isdir(path):
        open(path, "rb").close()
        return
    for name in os.listdir(path):
        if name not in EXCLUDED:
            fd = os.open(os.path.join(path, name), os.O_RDONLY)
            os.close(fd)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end) of a single-range `Range` header, None to send it all; ValueError if unsatisfiable."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, sep, last = header[len("bytes=") :].strip().partition("-")
    if not sep or (first and not first.isdigit()) or (last and not last.isdigit()) or not (first or last):
        return None
    if not first:
        start, end = max(0, size - int(last)), size
        if int(last) == 0:
            raise ValueError("empty suffix range")
    else:
        start, end = int(first), min(int(last) + 1, size) if last else size
        if last and int(last) < start:
            return None
    if start >= size:
        raise ValueError("range starts past the end")
    return start, end


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _typed(obj: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return {"apiVersion": api_version, "kind": kind, **rest}


def _point_at_export(spec_holder: dict[str, Any], url: str | None, ca_name: str, secret_name: str) -> None:
    spec = spec_holder.setdefault("spec", {})
    if not isinstance((spec.get("source") or {}).get("http"), dict):
        spec["source"] = {"http": {}}
    http_source = spec["source"]["http"]
    if url is not None:
        http_source["url"] = url
    http_source["certConfigMap"] = ca_name
    http_source["secretExtraHeaders"] = [secret_name]


def vm_manifests(
    vm: dict[str, Any],
    ca_cm: dict[str, Any],
    data_volumes: list[dict[str, Any]],
    volumes: tuple[Volume, ...],
    base: str,
    export_name: str,
) -> list[dict[str, Any]]:
    """The CA ConfigMap, the VM and its DataVolumes, each importing its disk from this export over HTTPS."""
    ca = _typed(ca_cm, "v1", "ConfigMap")
    ca_name = str(ca.get("metadata", {}).get("name", ""))
    secret_name = SECRET_NAME_PREFIX + export_name
    urls = {v.claim: f"https://{posixpath.normpath(base.strip() + '/' + v.gzip_uri)}" for v in volumes if v.gzip_uri}
    machine = _typed(vm, "kubevirt.io/v1", "VirtualMachine")
    templates = machine.get("spec", {}).get("dataVolumeTemplates") or []
    for index, template in enumerate(templates):
        # KubeVirt pairs templates with volumes by position; by name is the same pairing whatever the order.
        url = urls.get(template.get("metadata", {}).get("name", ""))
        if url is None and index < len(volumes) and volumes[index].gzip_uri:
            url = urls[volumes[index].claim]
        _point_at_export(template, url, ca_name, secret_name)
    resources = [ca, machine]
    for dv in data_volumes:
        typed = _typed(dv, "cdi.kubevirt.io/v1beta1", "DataVolume")
        _point_at_export(typed, urls.get(typed.get("metadata", {}).get("name", "")), ca_name, secret_name)
        resources.append(typed)
    return resources


def header_secret(token: str, export_name: str) -> dict[str, Any]:
    """The Secret a CDI DataVolume names in secretExtraHeaders to send the export's token."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET_NAME_PREFIX + export_name},
        "stringData": {"token": f"{TOKEN_HEADER}:{token}"},
    }


@functools.cache
def _yaml_dumper() -> Any:
    # PyYAML costs milliseconds to import, paid only by the first manifest request.
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, string)
    return Dumper


def render(resources: list[dict[str, Any]], as_json: bool) -> bytes:
    """A JSON List, or YAML documents each followed by `---` (sigs.k8s.io/yaml's layout: keys sorted)."""
    if as_json:
        return json.dumps(
            {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": resources}, indent=4, ensure_ascii=False
        ).encode()
    import yaml

    dumper = _yaml_dumper()
    return "".join(
        yaml.dump(r, Dumper=dumper, sort_keys=True, default_flow_style=False, allow_unicode=True, width=1 << 16)
        + "---\n"
        for r in resources
    ).encode()


class _GzipBody:
    """A response body gzip-compressed as it is written: HTTP/1.1 chunks of about CHUNK bytes, or for an HTTP/1.0
    client bytes until the connection closes."""

    def __init__(self, wfile: Any, chunked: bool) -> None:
        self.wfile, self.chunked = wfile, chunked
        # gzip's own default level: level 9 is several times slower on a disk image for a few percent.
        self.compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        self.pending = bytearray()
        self.written = 0

    def tell(self) -> int:
        return self.written

    def write(self, data: bytes) -> int:
        self.written += len(data)
        self.pending += self.compressor.compress(data)
        if len(self.pending) >= CHUNK:
            self._flush()
        return len(data)

    def close(self) -> None:
        self.pending += self.compressor.flush()
        self._flush()
        if self.chunked:
            self.wfile.write(b"0\r\n\r\n")

    def _flush(self) -> None:
        if self.pending:
            data = bytes(self.pending)
            self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data)
            self.pending.clear()


class Handler(http.server.BaseHTTPRequestHandler):
    """The export server's requests: route, check the token, serve."""

    protocol_version = "HTTP/1.1"

    def __init__(self, *args: Any, export: Export, **kwargs: Any) -> None:
        self.export = export
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _dispatch(self) -> None:
        split = urllib.parse.urlsplit(self.path)
        raw = urllib.parse.unquote(split.path)
        # As Go's ServeMux, route the cleaned path: `..` never reaches a handler, so no URI climbs out of a volume.
        path = posixpath.normpath("/" + raw).replace("//", "/")
        if raw.endswith("/") and path != "/":
            path += "/"
        if path == READINESS_PATH:
            self._send(200, b"OK")
            return
        route = None if "\0" in path else self._route(path)
        if route is None:
            self._send(404, b"404 page not found\n")
            return
        try:
            if self._authorized(urllib.parse.parse_qs(split.query)):
                route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _route(self, path: str) -> Callable[[], None] | None:
        for volume in self.export.volumes:
            if path == volume.raw_uri:
                return functools.partial(self._file, volume.image, "application/octet-stream")
            if path == volume.gzip_uri:
                return functools.partial(self._gzip, volume.image)
            if path == volume.archive_uri:
                return functools.partial(self._archive, volume.path)
            if volume.dir_uri and (path.startswith(volume.dir_uri) or path + "/" == volume.dir_uri):
                return functools.partial(self._dir, volume, path)
        for prefix, side in MANIFEST_SIDES.items():
            if self.export.vm_uri and path == prefix + self.export.vm_uri:
                return functools.partial(self._manifests, side)
            if self.export.secret_uri and path == prefix + self.export.secret_uri:
                return self._secret
        return None

    def _authorized(self, query: dict[str, list[str]]) -> bool:
        import hmac

        try:
            expected = _read(self.export.token_file).strip().encode()
        except OSError:
            self._send(500, b"cannot read the token\n")
            return False
        offered = [*query.get(TOKEN_HEADER, [])[:1], self.headers.get(TOKEN_HEADER, "")]
        if expected and any(hmac.compare_digest(token.encode(), expected) for token in offered if token):
            return True
        self._send(401, b"Unauthorized\n")
        return False

    def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8", **headers: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _get_only(self) -> bool:
        if self.command == "GET":
            return True
        self._send(400, b"")
        return False

    def _start_stream(self, content_type: str) -> _GzipBody:
        chunked = self.request_version != "HTTP/1.0"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.close_connection = True
            self.send_header("Connection", "close")
        self.end_headers()
        return _GzipBody(self.wfile, chunked)

    def _file(self, path: str, content_type: str) -> None:
        try:
            f = open(path, "rb")
        except OSError:
            self._send(500, b"cannot open the file\n")
            return
        with f:
            # Seeking sizes a block device too, whose stat size is 0.
            size = f.seek(0, os.SEEK_END)
            try:
                span = byte_range(self.headers.get("Range"), size)
            except ValueError:
                self._send(416, b"range not satisfiable\n", Content_Range=f"bytes */{size}")
                return
            start, end = span or (0, size)
            self.send_response(206 if span else 200)
            self.send_header("Content-Type", content_type)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(end - start))
            if span:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            if self.command != "HEAD" and end > start:
                self.connection.sendfile(f, start, end - start)

    def _gzip(self, path: str) -> None:
        if not self._get_only():
            return
        try:
            f = open(path, "rb")
        except OSError:
            self._send(500, b"cannot open the image\n")
            return
        with f:
            gz = self._start_stream("application/x-gzip")
            try:
                while data := f.read(CHUNK):
                    gz.write(data)
            except OSError as exc:
                self._abort(path, exc)
                return
            gz.close()

    def _archive(self, root: str) -> None:
        if not self._get_only():
            return
        try:
            check_readable(root)
        except OSError:
            self._send(500, b"cannot read the volume\n")
            return
        import tarfile

        gz = self._start_stream("application/x-gzip")
        try:
            # A plain "w" TarFile only writes and tells, never seeks: it streams without tarfile's own buffering.
            with tarfile.TarFile(fileobj=cast(Any, gz), mode="w", copybufsize=CHUNK) as tar:
                tar.add(root, arcname=".", filter=lambda i: None if posixpath.basename(i.name) in EXCLUDED else i)
        except OSError as exc:
            self._abort(root, exc)
            return
        gz.close()

    def _abort(self, what: str, exc: OSError) -> None:
        # The status is sent: closing without the body's last chunk is how the client learns it is truncated.
        self.close_connection = True
        if not isinstance(exc, (BrokenPipeError, ConnectionResetError)):
            print(f"virt-exportserver: streaming {what}: {exc}", file=sys.stderr, flush=True)

    def _dir(self, volume: Volume, path: str) -> None:
        if path + "/" == volume.dir_uri:
            self._redirect(posixpath.basename(path) + "/")
            return
        root = os.path.realpath(volume.path)
        target = os.path.realpath(os.path.join(root, path[len(volume.dir_uri) :]))
        # A symlink in the volume may point anywhere; what it resolves to must still be in the volume.
        if target != root and not target.startswith(root + os.sep):
            self._send(404, b"404 page not found\n")
        elif os.path.isdir(target):
            if path.endswith("/"):
                self._listing(target)
            else:
                self._redirect(posixpath.basename(path) + "/")
        elif os.path.exists(target) and not path.endswith("/"):
            self._file(target, mimetypes.guess_type(target)[0] or "application/octet-stream")
        else:
            self._send(404, b"404 page not found\n")

    def _redirect(self, location: str) -> None:
        # Relative, so it still holds behind the proxy, whose external path has a prefix this server never sees.
        query = urllib.parse.urlsplit(self.path).query
        self._send(301, b"", Location=location + (f"?{query}" if query else ""))

    def _listing(self, directory: str) -> None:
        try:
            with os.scandir(directory) as entries:
                names = sorted(e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries)
        except OSError:
            self._send(500, b"cannot list the directory\n")
            return
        lines = [f'<a href="{urllib.parse.quote(n)}">{html.escape(n)}</a>\n' for n in names]
        page = '<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n'
        self._send(200, (page + "".join(lines) + "</pre>\n").encode(), "text/html; charset=utf-8")

    def _manifest_file(self, key: str) -> str:
        return _read(os.path.join(self.export.manifest_dir, key))

    def _manifests(self, side: str) -> None:
        if not self._get_only():
            return
        try:
            base = self._manifest_file(f"{side}_host")
        except FileNotFoundError:
            # As KubeVirt: a link whose host is not configured (no external link host) has no manifests.
            self._send(404, b"404 page not found\n")
            return
        except OSError:
            self._send(500, b"cannot read the manifest data\n")
            return
        try:
            export_name = self._manifest_file("export-name").strip()
            vm = _object(self._manifest_file("virtualmachine-manifest"))
            ca_cm = _object(self._manifest_file(f"{side}_ca_cm"))
            dvs = self._data_volumes(vm)
        except (OSError, ValueError):
            self._send(500, b"cannot read the manifest data\n")
            return
        resources = vm_manifests(vm, ca_cm, dvs, self.export.volumes, base, export_name)
        self._send_resources(resources)

    def _data_volumes(self, vm: dict[str, Any]) -> list[dict[str, Any]]:
        result = []
        for volume in vm.get("spec", {}).get("template", {}).get("spec", {}).get("volumes") or []:
            source = volume.get("dataVolume") or volume.get("persistentVolumeClaim") or {}
            name = source.get("name") or source.get("claimName")
            if not name:
                continue
            try:
                result.append(_object(self._manifest_file(f"dv-{name}")))
            except FileNotFoundError:
                continue
        return result

    def _secret(self) -> None:
        if not self._get_only():
            return
        try:
            token = _read(self.export.token_file).strip()
            export_name = self._manifest_file("export-name").strip()
        except OSError:
            self._send(500, b"cannot read the token or the export's name\n")
            return
        self._send_resources([header_secret(token, export_name)])

    def _send_resources(self, resources: list[dict[str, Any]]) -> None:
        # As KubeVirt's: JSON unless the client asks for exactly application/yaml (virtctl's default).
        as_json = self.headers.get("Accept", "") != "application/yaml"
        self._send(200, render(resources, as_json), "application/json" if as_json else "application/yaml")


def serve(environ: Mapping[str, str]) -> int:
    export = export_from_env(environ)
    for volume in export.volumes:
        check_readable(volume.path)
    port = int(environ.get("EXPORT_SERVER_PORT") or 0)
    # Its handler threads are daemons: at the deadline the process ends without waiting for running downloads.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, export=export))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    print(f"{LISTENING}http://127.0.0.1:{server.server_address[1]}", flush=True)
    remaining = None
    if export.deadline is not None:
        remaining = max(0.0, (export.deadline - datetime.now(UTC)).total_seconds())
    threading.Event().wait(remaining)
    server.shutdown()
    server.server_close()
    print("Deadline exceeded, shutting down", file=sys.stderr, flush=True)
    return 0


def run() -> int:
    """The pod command: serve the export the environment describes until DEADLINE."""
    try:
        return serve(dict(os.environ))
    except (OSError, ValueError) as exc:
        print(f"virt-exportserver: {exc}", file=sys.stderr, flush=True)
        return 1
