"""virt-api's serving certificate from a Secret volume (`ca.crt`, `tls.crt`, `tls.key`) that virt-controller's leader
fills: every replica serves the same pair for the Service and publishes the same CA to the APIServices and webhooks,
so any number of replicas can run, and a renewed pair is loaded into the listening context without a restart."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from pykubevirt.pki.file_watch import FileWatch

# A few stat calls: the kubelet fills the volume within about a minute of the Secret's creation.
POLL_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class ServingFiles:
    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def cert_file(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.directory / "tls.key"

    def watch(self) -> FileWatch[bytes]:
        """The CA's PEM, read again when the files change, once the pair is one that loads."""

        def load() -> bytes:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.cert_file, self.key_file)
            return self.ca_file.read_bytes()

        return FileWatch((self.ca_file, self.cert_file, self.key_file), load)
