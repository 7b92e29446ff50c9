"""The 422 `Status` KubeVirt's webhooks render from validation causes (pkg/util/webhooks: ToAdmissionResponse)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pykubevirt.api.causes import Cause

# KubeVirt puts at most this many causes in one rejection and counts the rest.
MAX_CAUSES = 10


def rejection_message(causes: Sequence[Cause]) -> str:
    """The first ten cause messages joined by ", ", then ", and N more validation errors"."""
    shown = causes[:MAX_CAUSES]
    message = ", ".join(c.message for c in shown)
    if len(causes) > MAX_CAUSES:
        message = f"{message}, and {len(causes) - MAX_CAUSES} more validation errors"
    return message


def failure_status(message: str, code: int, **fields: Any) -> dict[str, Any]:
    """A Failure `Status` as kube-apiserver hands a webhook's refusal on; `fields` are its reason and details."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        **fields,
        "code": code,
    }


def rejection_status(causes: Sequence[Cause], *, message_prefix: str = "") -> dict[str, Any]:
    """A `Status` with code 422 and reason `Invalid`, as KubeVirt's webhooks answer."""
    details = {"causes": [c.to_dict() for c in causes[:MAX_CAUSES]]}
    return failure_status(message_prefix + rejection_message(causes), 422, reason="Invalid", details=details)


class AdmissionRejected(Exception):
    """Raised by the admission chain when validation finds causes."""

    def __init__(self, causes: Iterable[Cause], webhook: str = "") -> None:
        self.causes = list(causes)
        self.webhook = webhook
        super().__init__(rejection_message(self.causes))

    def denied_prefix(self) -> str:
        """What kube-apiserver puts before a webhook's message: 'admission webhook "<name>" denied the request: '."""
        return f'admission webhook "{self.webhook}" denied the request: ' if self.webhook else ""

    def status(self) -> dict[str, Any]:
        return rejection_status(self.causes, message_prefix=self.denied_prefix())


class RequestDenied(AdmissionRejected):
    """A webhook's plain refusal: `Status{code, message}` without causes (KubeVirt answers 400)."""

    def __init__(self, message: str, webhook: str = "", code: int = 400) -> None:
        super().__init__([], webhook)
        self.message = message
        self.code = code
        self.args = (message,)

    def __str__(self) -> str:
        return self.message

    def status(self) -> dict[str, Any]:
        # kube-apiserver keeps the webhook's code and message and adds the "denied the request" prefix.
        return failure_status(self.denied_prefix() + self.message, self.code)
