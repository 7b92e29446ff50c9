"""The handler↔launcher protocol: message shapes, the version check and what a handler sees from an older launcher."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pykubevirt.handler.launcher_client import CommandFailed, LauncherClient
from pykubevirt.launcher import protocol
from pykubevirt.launcher.converter import domain_name as converter_domain_name
from pykubevirt.launcher.protocol import PROTOCOL_VERSION, Command, ProtocolMismatch


def test_requests_carry_the_version_and_only_the_fields_given() -> None:
    assert protocol.request(Command.STATUS) == {"cmd": "status", "protocolVersion": PROTOCOL_VERSION}
    vmi = {"metadata": {"uid": "u"}}
    assert protocol.request(Command.SYNC, vmi=vmi, request_id=3) == {
        "cmd": "sync",
        "protocolVersion": PROTOCOL_VERSION,
        "id": 3,
        "vmi": vmi,
    }
    line = protocol.encode(protocol.request(Command.WATCH))
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert protocol.decode(line) == {"cmd": "watch", "protocolVersion": PROTOCOL_VERSION}


def test_parse_request_drops_fields_of_the_wrong_type() -> None:
    parsed = protocol.parse_request({"cmd": "sync", "protocolVersion": PROTOCOL_VERSION, "id": "x", "vmi": [1]})
    assert parsed == {"cmd": "sync", "protocolVersion": PROTOCOL_VERSION}


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ({}, "no protocol version"),
        ({"protocolVersion": PROTOCOL_VERSION + 1}, f"protocol version {PROTOCOL_VERSION + 1}"),
        ({"protocolVersion": str(PROTOCOL_VERSION)}, f"protocol version '{PROTOCOL_VERSION}'"),
        ({"protocolVersion": True}, "protocol version True"),
    ],
)
def test_check_version_names_both_versions(message: dict[str, object], shown: str) -> None:
    with pytest.raises(ProtocolMismatch) as raised:
        protocol.check_version(message, "virt-launcher")
    assert str(raised.value) == (
        f"virt-launcher speaks {shown}, this side speaks version {PROTOCOL_VERSION}; "
        "virt-handler and virt-launcher must be upgraded together"
    )


def test_check_version_accepts_its_own() -> None:
    protocol.check_version({"protocolVersion": PROTOCOL_VERSION}, "virt-launcher")


def test_decode_refuses_what_is_not_an_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        protocol.decode(b"[1, 2]\n")
    with pytest.raises(ValueError):
        protocol.decode(b"not json\n")


def test_domain_name_is_namespace_underscore_name_everywhere() -> None:
    assert protocol.domain_name("ns", "vm") == "ns_vm"
    assert protocol.domain_name("", "vm") == "default_vm"
    assert converter_domain_name({"metadata": {"namespace": "ns", "name": "vm"}}) == "ns_vm"


def test_error_reply_carries_the_version() -> None:
    assert protocol.error_reply("boom", 4) == {
        "ok": False,
        "error": "boom",
        "protocolVersion": PROTOCOL_VERSION,
        "id": 4,
    }


async def _peer(path: Path, replies: list[bytes]) -> asyncio.AbstractServer:
    """A unix socket peer answering each line with the next of `replies` (a launcher build that does not exist here)."""
    pending = list(replies)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readline() and pending:
            writer.write(pending.pop(0))
            await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(serve, path=str(path))


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "launcher-sock"


async def test_a_launcher_from_before_versioning_is_a_protocol_mismatch_not_a_key_error(socket_path: Path) -> None:
    old_status = {"id": 1, "ok": True, "domain": {"state": "Running", "reason": "Booted", "defined": True}}
    server = await _peer(socket_path, [json.dumps(old_status).encode() + b"\n"])
    async with server:
        with pytest.raises(ProtocolMismatch, match="virt-launcher speaks no protocol version"):
            await LauncherClient(socket_path).status()


async def test_a_refusal_by_a_newer_launcher_is_a_protocol_mismatch(socket_path: Path) -> None:
    refusal = {"ok": False, "error": "virt-handler speaks protocol version 1", "protocolVersion": PROTOCOL_VERSION + 1}
    server = await _peer(socket_path, [json.dumps(refusal).encode() + b"\n"])
    async with server:
        with pytest.raises(ProtocolMismatch, match=f"speaks protocol version {PROTOCOL_VERSION + 1}"):
            await LauncherClient(socket_path).sync({"metadata": {"uid": "u"}})


async def test_an_answer_that_is_not_json_fails_the_command(socket_path: Path) -> None:
    server = await _peer(socket_path, [b"garbage\n"])
    async with server:
        with pytest.raises(CommandFailed, match="not a JSON object"):
            await LauncherClient(socket_path).kill()


async def test_a_watch_update_of_another_version_ends_the_watch_with_a_mismatch(socket_path: Path) -> None:
    current = {"protocolVersion": PROTOCOL_VERSION, "domain": {"state": "Running"}}
    server = await _peer(socket_path, [json.dumps(current).encode() + b"\n" + b'{"domain":{"state":"Paused"}}\n'])
    async with server:
        stream = LauncherClient(socket_path).watch()
        first = await anext(stream)
        assert first["domain"]["state"] == "Running"
        with pytest.raises(ProtocolMismatch):
            await anext(stream)
