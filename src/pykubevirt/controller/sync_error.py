"""Sync errors: a message and a reason, shown as the VM's Failure condition and the VMI's Synchronized=False."""

from __future__ import annotations


class SyncError(Exception):
    """A reconcile step that failed in a way the user should see on the object."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
