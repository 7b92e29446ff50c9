"""`pykubevirt validate`: KubeVirt's defaults and validation applied to manifests, offline."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.offline import check_document
from pykubevirt.cli.manifests import read_documents
from pykubevirt.config.cluster_config import ClusterConfig


def _describe(doc: Any) -> str:
    if isinstance(doc, dict):
        name = (doc.get("metadata") or {}).get("name") or (doc.get("metadata") or {}).get("generateName") or "<unnamed>"
        return f"{doc.get('kind', '<no kind>')}/{name}"
    return "<document>"


def run(args: argparse.Namespace) -> int:
    ctx = AdmissionContext(config=ClusterConfig(feature_gates=args.feature_gates))
    admitted: list[dict[str, Any]] = []
    failures = 0
    for document in read_documents(args.filename):
        if document.error:
            print(f"error: {document.where}: {document.error}", file=sys.stderr)
            failures += 1
            continue
        verdict = check_document(document.content, ctx)
        for warning in verdict.warnings:
            print(f"Warning: {document.where}: {warning}", file=sys.stderr)
        if verdict.object is None:
            print(f"rejected: {document.where}: {_describe(document.content)}: {verdict.error}", file=sys.stderr)
            failures += 1
            continue
        admitted.append(verdict.object)
    if args.output == "yaml" and admitted:
        sys.stdout.write(yaml.safe_dump_all(admitted, sort_keys=False))
    elif args.output == "json" and admitted:
        payload: Any = admitted[0] if len(admitted) == 1 else {"apiVersion": "v1", "kind": "List", "items": admitted}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    return 1 if failures else 0
