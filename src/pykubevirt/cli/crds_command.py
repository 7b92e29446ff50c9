"""`pykubevirt crds`: the CRDs generated from the API model, printed or written to a directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pykubevirt.api.crd import all_crd_files


def run(args: argparse.Namespace) -> int:
    files = all_crd_files()
    if args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text)
        print(f"wrote {len(files)} CRDs to {out}")
        return 0
    sys.stdout.write("---\n".join(files.values()))
    return 0
