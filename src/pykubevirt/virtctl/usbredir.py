"""`virtctl usbredir (vendor:product)|(bus-device) VMI`: a local USB device redirected into the VMI
(pkg/virtctl/usbredir).

A local TCP port is proxied to one of the VMI's USB redirection channels; `usbredirect --device D --to ADDRESS`
is started on it, unless `--no-launch` leaves that to the user (the address is printed then).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal

import aiohttp

from pykubevirt.client.api import KubeClient
from pykubevirt.client.streams import pump_websocket_stream
from pykubevirt.virtctl.client import VirtctlError, error_message, open_stream

USBREDIR_CLIENT = "usbredirect"
NO_LAUNCH = "--no-launch"


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("usb_args", nargs="+", metavar="(vendor:product)|(bus-device) VMI")
    cmd.add_argument(
        NO_LAUNCH, dest="no_launch", action="store_true", help="If set, you should launch the usbredir client yourself"
    )


def device_and_vmi(words: list[str], no_launch: bool) -> tuple[str, str]:
    """cobra's RangeArgs(1, 2), then KubeVirt's own checks: the device is needed unless the client is not started."""
    if len(words) > 2:
        raise VirtctlError(f"accepts between 1 and 2 arg(s), received {len(words)}")
    if no_launch:
        return "", words[0]
    if len(words) != 2:
        raise VirtctlError("Missing argument")
    if shutil.which(USBREDIR_CLIENT) is None:
        missing = f'exec: "{USBREDIR_CLIENT}": executable file not found in $PATH'
        raise VirtctlError(f"Error on finding {USBREDIR_CLIENT} in $PATH: {missing}")
    return words[0], words[1]


async def run_usbredir(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    device, name = device_and_vmi(list(args.usb_args), args.no_launch)
    try:
        ws = await open_stream(client, namespace, name, "usbredir")
    except Exception as exc:
        raise VirtctlError(f"Can't access VMI {name}: {error_message(exc)}") from exc
    connected: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await connected.put((reader, writer))

    try:
        server = await asyncio.start_server(accept, "127.0.0.1", 0)
    except OSError as exc:
        await ws.close()
        raise VirtctlError(f"Can't create usbredir client: Can't listen: {exc.strerror or exc}") from exc
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    local: asyncio.subprocess.Process | None = None
    try:
        if args.no_launch:
            print(f"User can connect usbredir client at: {address}", flush=True)
        else:
            local = await asyncio.create_subprocess_exec(USBREDIR_CLIENT, "--device", device, "--to", address)
        await _serve(ws, server, connected, interrupted, local)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        server.close()
        await ws.close()
        if local is not None and local.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                local.terminate()
            await local.wait()


async def _serve(
    ws: aiohttp.ClientWebSocketResponse,
    server: asyncio.Server,
    connected: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]],
    interrupted: asyncio.Event,
    local: asyncio.subprocess.Process | None,
) -> None:
    """One client session; it ends with the local client (its exit status), an interrupt, or the stream (which, as
    in KubeVirt, is reported as the remote connection having closed)."""
    stop = asyncio.create_task(interrupted.wait())
    exited = asyncio.create_task(local.wait()) if local is not None else None
    accepted = asyncio.create_task(connected.get())
    ends = [t for t in (stop, exited) if t is not None]
    try:
        await asyncio.wait([accepted, *ends], return_when=asyncio.FIRST_COMPLETED)
        if accepted.done():
            server.close()
            reader, writer = accepted.result()
            pumping = asyncio.create_task(pump_websocket_stream(ws, reader, writer))
            try:
                await asyncio.wait([pumping, *ends], return_when=asyncio.FIRST_COMPLETED)
            finally:
                pumping.cancel()
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
    finally:
        for task in (accepted, *ends):
            task.cancel()
    if interrupted.is_set():
        return
    if local is not None and local.returncode is not None:
        if local.returncode:
            raise VirtctlError(f"exit status {local.returncode}")
        return
    raise VirtctlError("Remote connection has closed.")
