"""accessCredentials propagated by `qemuGuestAgent`: the mounted Secrets' SSH keys and passwords into the guest
through the agent.

Upstream: pkg/virt-launcher/virtwrap/access-credentials. The launcher reads each credential's Secret where the pod
mounts it (`/var/run/kubevirt-private/secret/<secret>-access-cred/`), pings the agent, and sets each listed user's
authorized_keys with libvirt's authorizedSSHKeysSet (the file is replaced: KubeVirt manages it), and sets the
password of each user a userPassword Secret names (file name = user) by guest-set-user-password. It resyncs when a
Secret's files change (checked every 15 s) and every 5 minutes, and reports {succeeded, message} for virt-handler's
AccessCredentialsSynchronized condition.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pykubevirt.api import pod_layout
from pykubevirt.launcher.domain_manager import DomainManager

log = logging.getLogger("pykubevirt.launcher.credentials")

SECRET_SOURCE_DIR: Final = pod_layout.CONFIG_SOURCE_DIRS["secret"]
CHECK_INTERVAL: Final = 15.0
FORCE_RESYNC_INTERVAL: Final = 300.0
AGENT_OFFLINE: Final = "Guest agent is offline"


@dataclass(frozen=True)
class Result:
    """What the launcher reports (api.AccessCredentialMetadata)."""

    succeeded: bool
    message: str

    def to_status(self) -> dict[str, Any]:
        return {"succeeded": self.succeeded, "message": self.message}


def agent_ssh_credentials(vmi: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(secret name, users) of each SSH key credential propagated through the guest agent, in spec order."""
    result = []
    for credential in (vmi.get("spec") or {}).get("accessCredentials") or []:
        ssh = credential.get("sshPublicKey") or {}
        agent = (ssh.get("propagationMethod") or {}).get("qemuGuestAgent")
        secret = ((ssh.get("source") or {}).get("secret") or {}).get("secretName")
        if agent is not None and secret:
            result.append((str(secret), [str(u) for u in agent.get("users") or []]))
    return result


def agent_password_secrets(vmi: Mapping[str, Any]) -> list[str]:
    """The Secrets of each userPassword credential propagated through the guest agent, in spec order."""
    result = []
    for credential in (vmi.get("spec") or {}).get("accessCredentials") or []:
        password = credential.get("userPassword") or {}
        agent = (password.get("propagationMethod") or {}).get("qemuGuestAgent")
        secret = ((password.get("source") or {}).get("secret") or {}).get("secretName")
        if agent is not None and secret:
            result.append(str(secret))
    return result


def read_passwords(directory: Path) -> dict[str, str]:
    """user → password from a mounted userPassword Secret (one file per user; surrounding space trimmed)."""
    passwords = {}
    for path in sorted(directory.iterdir()):
        if path.name.startswith("..") or path.is_dir():
            continue
        password = path.read_text(errors="replace").strip()
        if password:
            passwords[path.name] = password
    return passwords


def set_password_command(user: str, password: str) -> str:
    """guest-set-user-password with the plain password base64-encoded, as KubeVirt sends it."""
    encoded = base64.b64encode(password.encode()).decode()
    arguments = {"username": user, "password": encoded, "crypted": False}
    return json.dumps({"execute": "guest-set-user-password", "arguments": arguments})


def secret_dir_name(secret: str) -> str:
    return f"{SECRET_SOURCE_DIR}/{secret}-access-cred"


def read_keys(directory: Path) -> list[str]:
    """Every non-empty line of every key file of a mounted Secret (its `..data` links skipped), files in name order."""
    keys: list[str] = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith("..") or path.is_dir():
            continue
        keys.extend(line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip())
    return keys


def users_keys(credentials: list[tuple[str, list[str]]], secret_keys: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Each user's keys: those of every Secret that names the user, in credential order."""
    result: dict[str, list[str]] = {}
    for secret, users in credentials:
        for user in users:
            result.setdefault(user, []).extend(secret_keys.get(secret, []))
    return result


def _snapshot(directories: list[Path]) -> tuple[tuple[str, float, int], ...]:
    """Names, mtimes and sizes of the Secrets' files: a change means kubelet rewrote a Secret."""
    entries = []
    for directory in directories:
        with contextlib.suppress(OSError):
            for path in sorted(directory.iterdir()):
                with contextlib.suppress(OSError):
                    stat = path.stat()
                    entries.append((str(path), stat.st_mtime, stat.st_size))
    return tuple(entries)


class AccessCredentialManager:
    """Propagates one VMI's agent credentials; `on_result` runs when the reported result changes."""

    def __init__(
        self,
        domain: DomainManager,
        host: Callable[[str], Path],
        on_result: Callable[[], None],
        *,
        check_interval: float = CHECK_INTERVAL,
    ) -> None:
        self.domain = domain
        self.host = host
        self.on_result = on_result
        self.check_interval = check_interval
        self.result: Result | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, vmi: Mapping[str, Any]) -> None:
        """Watch the VMI's agent credentials; nothing happens for a VMI without any."""
        credentials = agent_ssh_credentials(vmi)
        passwords = agent_password_secrets(vmi)
        if self._task is not None or not (credentials or passwords):
            return
        self._task = asyncio.get_running_loop().create_task(self._watch(credentials, passwords))

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _report(self, result: Result) -> None:
        if result != self.result:
            self.result = result
            log.info("access credentials %s%s", "synced" if result.succeeded else "failed: ", result.message)
            self.on_result()

    async def _watch(self, credentials: list[tuple[str, list[str]]], passwords: list[str]) -> None:
        secrets = [secret for secret, _ in credentials] + passwords
        directories = [self.host(secret_dir_name(secret)) for secret in secrets]
        loop = asyncio.get_running_loop()
        seen: tuple[tuple[str, float, int], ...] | None = None
        last_sync = 0.0
        pending = True
        while True:
            snapshot = await asyncio.to_thread(_snapshot, directories)
            if snapshot != seen or loop.time() - last_sync >= FORCE_RESYNC_INTERVAL:
                seen, pending = snapshot, True
            if pending:
                pending = not await self.sync(credentials, passwords)
                last_sync = loop.time()
            await asyncio.sleep(self.check_interval)

    async def sync(self, credentials: list[tuple[str, list[str]]], passwords: Sequence[str] = ()) -> bool:
        """One propagation round; False when it must be retried."""
        try:
            await self.domain.agent_command('{"execute":"guest-ping"}')
        except Exception:
            self._report(Result(False, AGENT_OFFLINE))
            return False
        secret_keys: dict[str, list[str]] = {}
        for secret, _ in credentials:
            directory = self.host(secret_dir_name(secret))
            try:
                secret_keys[secret] = await asyncio.to_thread(read_keys, directory)
            except OSError as exc:
                self._report(
                    Result(
                        False,
                        "error occurred while reading the list of secrets files from the base directory "
                        f"{secret_dir_name(secret)}: {exc.strerror or exc}",
                    )
                )
                return False
        for user, keys in users_keys(credentials, secret_keys).items():
            try:
                await self.domain.set_authorized_keys(user, keys)
            except Exception as exc:
                self._report(
                    Result(False, f"Error encountered writing ssh pub key access credentials for user [{user}]: {exc}")
                )
                return False
        for secret in passwords:
            directory = self.host(secret_dir_name(secret))
            try:
                users = await asyncio.to_thread(read_passwords, directory)
            except OSError as exc:
                self._report(
                    Result(
                        False,
                        "error occurred while reading the list of secrets files from the base directory "
                        f"{secret_dir_name(secret)}: {exc.strerror or exc}",
                    )
                )
                return False
            for user, password in users.items():
                try:
                    await self.domain.agent_command(set_password_command(user, password))
                except Exception as exc:
                    self._report(Result(False, f"Error encountered setting password for user [{user}]: {exc}"))
                    return False
        self._report(Result(True, ""))
        return True
