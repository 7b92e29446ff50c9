"""The handlers' migration proxies: unix sockets in the pods, TCP between the nodes (KubeVirt's migration-proxy.go).

The source handler listens on `pod_layout.migration_socket(uid[, port])` for the source's libvirt and QEMU and dials
the target node's address; the target handler listens there (`targetNodeAddress`, `targetDirectMigrationNodePorts`)
and dials the target pod's libvirt socket and the sockets its QEMU listens on. Unix sockets cross the pods' network
namespaces, so the launchers need no route to each other.

The TCP leg is TLS with both handlers' certificates (handler/certificates.py) unless the migration's configuration
says `disableTLS: true`; then it is plain TCP and the bytes are spliced without entering Python.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import itertools
import logging
import os
import select
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

from pykubevirt.handler.certificates import (
    CLIENT_COMMON_NAME,
    HANDSHAKE_TIMEOUT_SECONDS,
    SERVER_COMMON_NAME,
    check_peer,
)

log = logging.getLogger("pykubevirt.handler.migration")

# Bytes one splice moves at most: the pipe's capacity is raised to this where the kernel allows.
CHUNK = 1024 * 1024
F_SETPIPE_SZ = 1031


def _splice(source: socket.socket, sink: socket.socket) -> None:
    """Copy `source` to `sink` until EOF through a pipe with splice(2): the bytes never enter Python.

    The memory stream is the guest's whole RAM; relaying it through Python buffers in two handlers took more CPU
    than the QEMUs on a loaded host (a third of the libvirt job's time)."""
    read_end, write_end = os.pipe()
    try:
        with contextlib.suppress(OSError):
            fcntl.fcntl(write_end, F_SETPIPE_SZ, CHUNK)
        while moved := os.splice(source.fileno(), write_end, CHUNK):
            while moved:
                moved -= os.splice(read_end, sink.fileno(), moved)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
    except OSError:
        # One side broke: neither direction can go on.
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
    finally:
        os.close(read_end)
        os.close(write_end)


# Plaintext or ciphertext one side may have waiting before the proxy stops reading the other.
TLS_BUFFER = 4 * CHUNK
# What one read of the TLS pump takes from a socket.
TLS_READ = 256 * 1024
# The most plaintext one TLS record holds.
TLS_RECORD = 16 * 1024
# Buffers one sendmsg takes at most (well under the kernel's IOV_MAX of 1024).
SENDMSG_CHUNKS = 64


class TLSStream:
    """One end of the TCP leg in TLS: the socket and an OpenSSL object over memory buffers.

    The proxy's one thread per connection does every TLS operation (an OpenSSL connection is not to be used from two
    threads at once) and all socket I/O, so reading one way never blocks writing the other."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, *, server_side: bool) -> None:
        self.sock = sock
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=server_side)
        # The other handler's certificate: the client's on the target, the server's on the source.
        self.peer_name = CLIENT_COMMON_NAME if server_side else SERVER_COMMON_NAME

    def handshake(self, timeout: float = HANDSHAKE_TIMEOUT_SECONDS) -> None:
        """Complete the handshake (blocking) and check the peer; raises ssl.SSLError or OSError."""
        self.sock.settimeout(timeout)
        try:
            while True:
                try:
                    self.tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    self._flush()
                    data = self.sock.recv(CHUNK)
                    if not data:
                        raise ConnectionResetError("the peer closed the connection during the TLS handshake") from None
                    self.incoming.write(data)
                except ssl.SSLError:
                    # Tell the peer why (the alert OpenSSL wrote), as far as it still listens.
                    with contextlib.suppress(OSError):
                        self._flush()
                    raise
            self._flush()
            check_peer(self.tls.getpeercert(), self.peer_name)
        finally:
            self.sock.settimeout(None)

    def _flush(self) -> None:
        if self.outgoing.pending:
            self.sock.sendall(self.outgoing.read())

    def close(self) -> None:
        self.sock.close()


End = socket.socket | TLSStream


def _shutdown(end: End, how: int) -> None:
    with contextlib.suppress(OSError):
        (end.sock if isinstance(end, TLSStream) else end).shutdown(how)


def _pump(plain: socket.socket, secure: TLSStream) -> None:
    """Both directions between a plain socket and a TLS one until both reach EOF, in one thread.

    The end of a direction is a TCP half-close on either leg (a TLS close_notify would end both directions in
    OpenSSL): what was sent before it arrives whole, and a truncated record is an error. What one read brings is
    written on at once, as far as the other socket takes it; only the rest waits for the poll."""
    raw = secure.sock
    plain.setblocking(False)
    raw.setblocking(False)
    to_secure = _Outbox()  # ciphertext for raw
    to_plain = _Outbox()  # plaintext for plain
    plain_eof = secure_eof = False
    raw_shut = plain_shut = False
    poller = select.poll()
    watching = {plain.fileno(): 0, raw.fileno(): 0}
    # A reused buffer per socket: a fresh TLS_READ-sized bytes object for every read costs more than the data.
    plain_buffer = memoryview(bytearray(TLS_READ))
    raw_buffer = memoryview(bytearray(TLS_READ))
    try:
        # Records that came in with the handshake's last flight are already read off the socket.
        secure_eof = _decrypt(secure, to_plain)
        while not (raw_shut and plain_shut):
            # Read from one side while the other side's queue has room; write what is queued.
            wanted = {
                plain.fileno(): (select.POLLIN if not plain_eof and to_secure.size < TLS_BUFFER else 0)
                | (select.POLLOUT if to_plain else 0),
                raw.fileno(): (select.POLLIN if not secure_eof and to_plain.size < TLS_BUFFER else 0)
                | (select.POLLOUT if to_secure else 0),
            }
            for fd, events in wanted.items():
                if events != watching[fd]:
                    if events:
                        poller.register(fd, events)  # registers, or modifies a registered one
                    else:
                        poller.unregister(fd)
                    watching[fd] = events
            ready = dict(poller.poll())
            # Plaintext goes into OpenSSL to be encrypted, ciphertext to be decrypted; an empty read is EOF.
            if (data := _receive(plain, plain_buffer, ready, watching)) is not None:
                if data:
                    secure.tls.write(data)
                else:
                    plain_eof = True
            if (data := _receive(raw, raw_buffer, ready, watching)) is not None:
                if data:
                    secure.incoming.write(data)
                    secure_eof = _decrypt(secure, to_plain)
                else:
                    secure_eof = True
            # The records of the plaintext, and whatever OpenSSL answers on its own (a key update).
            to_secure.add(secure.outgoing.read())
            to_plain.send(plain)
            to_secure.send(raw)
            if plain_eof and not to_secure and not raw_shut:
                raw.shutdown(socket.SHUT_WR)
                raw_shut = True
            if secure_eof and not to_plain and not plain_shut:
                plain.shutdown(socket.SHUT_WR)
                plain_shut = True
    except (OSError, ssl.SSLError) as exc:
        # One side broke (or the peer's TLS did): neither direction can go on.
        log.debug("migration proxy: connection ended: %s", exc)
        _shutdown(plain, socket.SHUT_RDWR)
        _shutdown(secure, socket.SHUT_RDWR)


def _receive(
    sock: socket.socket, buffer: memoryview, ready: dict[int, int], watching: dict[int, int]
) -> memoryview | None:
    """What one read of `sock` brings (empty at EOF) when the poll found it readable and it was polled for input;
    None when it is not to be read now."""
    fd = sock.fileno()
    if not (ready.get(fd, 0) & (select.POLLIN | select.POLLHUP | select.POLLERR) and watching[fd] & select.POLLIN):
        return None
    return buffer[: sock.recv_into(buffer)]


class _Outbox:
    """What waits to be written to one socket: the chunks as they came (no copying into one buffer), written with
    one scatter-gather sendmsg as far as the socket takes them."""

    def __init__(self) -> None:
        self.chunks: collections.deque[memoryview] = collections.deque()
        self.size = 0

    def __bool__(self) -> bool:
        return self.size > 0

    def add(self, data: bytes) -> None:
        if data:
            self.chunks.append(memoryview(data))
            self.size += len(data)

    def send(self, sock: socket.socket) -> None:
        while self.chunks:
            try:
                sent = sock.sendmsg(list(itertools.islice(self.chunks, SENDMSG_CHUNKS)))
            except BlockingIOError:
                return
            self.size -= sent
            while sent and sent >= len(self.chunks[0]):
                sent -= len(self.chunks.popleft())
            if sent:
                self.chunks[0] = self.chunks[0][sent:]
                return


def _decrypt(secure: TLSStream, into: _Outbox) -> bool:
    """Queue every whole record's plaintext; True once the peer closed TLS (close_notify)."""
    while True:
        try:
            # One record at a time, in a bytes object of its size: no copy beyond the decryption.
            into.add(secure.tls.read(TLS_RECORD))
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLZeroReturnError:
            return True


def relay(client: End, upstream: End) -> None:
    """Both directions between two connected blocking ends until both reach EOF; then both are closed.

    Two plain sockets are spliced, one thread a direction; a TLS end is pumped with its plain partner in one thread."""
    try:
        if isinstance(client, TLSStream) and isinstance(upstream, socket.socket):
            _pump(upstream, client)
        elif isinstance(upstream, TLSStream) and isinstance(client, socket.socket):
            _pump(client, upstream)
        elif isinstance(client, socket.socket) and isinstance(upstream, socket.socket):
            back = threading.Thread(target=_splice, args=(upstream, client), daemon=True, name="migration-proxy")
            back.start()
            _splice(client, upstream)
            back.join()
        else:
            raise TypeError("a migration proxy has TLS on one leg at most")
    finally:
        client.close()
        upstream.close()


Dial = Callable[[], End]


def dial_unix(path: str) -> Dial:
    def dial() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return sock

    return dial


def dial_tcp(host: str, port: int, tls: ssl.SSLContext | None = None) -> Dial:
    """Connect to the target handler's proxy; with `tls`, as a client presenting the handler's client certificate."""

    def dial() -> End:
        sock = socket.create_connection((host, port))
        if tls is None:
            return sock
        secure = TLSStream(sock, tls, server_side=False)
        try:
            secure.handshake()
        except BaseException:
            sock.close()
            raise
        return secure

    return dial


class MigrationProxy:
    """Forwards every connection it accepts (TCP on `address`, or the unix socket `path`) to what `dial` opens.

    With `tls`, a TCP client must complete a handshake with it (the target handler's server context, which asks for
    the source handler's client certificate) before anything is dialled."""

    def __init__(
        self,
        dial: Dial,
        *,
        address: str = "",
        path: str = "",
        shown: str = "",
        role: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.dial = dial
        self.tls = tls
        # The port it stands for (targetDirectMigrationNodePorts: 0 libvirt, 49152 memory, 49153 block copy).
        self.role = role
        self.address = address
        self.path = path
        self.shown = shown
        self.port = 0
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None

    async def start(self) -> int:
        if self.path:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                Path(self.path).unlink()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(self.path)
        else:
            listener = socket.create_server((self.address, 0))
            self.port = int(listener.getsockname()[1])
        listener.listen(16)
        listener.setblocking(False)
        self._listener = listener
        self._accepting = asyncio.get_running_loop().create_task(self._accept(listener))
        log.info("migration proxy %s → %s", self.path or f"{self.address}:{self.port}", self.shown)
        return self.port

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            client, _ = await loop.sock_accept(listener)
            client.setblocking(True)
            # Each connection is relayed by threads of its own for as long as it lasts (the executor's few
            # threads are for short calls).
            threading.Thread(target=self._serve, args=(client,), daemon=True, name="migration-proxy").start()

    def _serve(self, accepted: socket.socket) -> None:
        client: End = accepted
        if self.tls is not None:
            secure = TLSStream(accepted, self.tls, server_side=True)
            try:
                secure.handshake()
            except (OSError, ssl.SSLError) as exc:
                log.warning("migration proxy: refused a peer at %s: %s", self.address, exc)
                accepted.close()
                return
            client = secure
        try:
            upstream = self.dial()
        except (OSError, ssl.SSLError) as exc:
            log.warning("migration proxy: %s unreachable: %s", self.shown, exc)
            client.close()
            return
        relay(client, upstream)

    async def stop(self) -> None:
        """No new connections; those under way run to their end."""
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
            self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self.path:
            with contextlib.suppress(FileNotFoundError):
                Path(self.path).unlink()


class ProxySet:
    """The proxies of one migration, stopped together."""

    def __init__(self) -> None:
        self.proxies: list[MigrationProxy] = []

    async def add(self, proxy: MigrationProxy) -> MigrationProxy:
        await proxy.start()
        self.proxies.append(proxy)
        return proxy

    async def stop(self) -> None:
        for proxy in self.proxies:
            await proxy.stop()
        self.proxies.clear()
