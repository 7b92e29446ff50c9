"""Which response media types a client accepts, as kube-apiserver negotiates them: none it serves is a 406."""

from __future__ import annotations

from pykubevirt.api import errors

# What kube-apiserver's codecs serve, in its order (custom resources' too); this server answers each in JSON.
SERVED = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")


def check_acceptable(accept: str | None) -> None:
    """406 when the Accept header names no media type kube serves (no header, or */*, accepts JSON)."""
    if not accept or not accept.strip():
        return
    for clause in accept.split(","):
        media, *params = (part.strip() for part in clause.split(";"))
        if not media:
            continue
        quality = next((p.split("=", 1)[1] for p in params if p.replace(" ", "").startswith("q=")), "1")
        try:
            if float(quality) <= 0:
                continue
        except ValueError:
            continue
        if any(_matches(media.lower(), served) for served in SERVED):
            return
    raise errors.not_acceptable(f"only the following media types are accepted: {', '.join(SERVED)}")


def _matches(wanted: str, served: str) -> bool:
    kind, _, subtype = wanted.partition("/")
    served_kind, _, served_subtype = served.partition("/")
    if kind == "*":
        return True
    return kind == served_kind and subtype in ("*", served_subtype)
