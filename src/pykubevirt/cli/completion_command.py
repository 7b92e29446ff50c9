"""`pykubevirt completion bash|zsh [--command virtctl]`: shell completion generated from the commands' own parsers.

shtab walks the argparse tree, so completion follows every subcommand and flag as they change. `make setup` writes
the scripts into the venv (share/bash-completion, share/zsh/site-functions) and has the venv's activate load them.
"""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh")
COMMANDS = ("pykubevirt", "virtctl")


def script(command: str, shell: str) -> str:
    import shtab

    if command == "virtctl":
        from pykubevirt.virtctl.main import build_parser as virtctl_parser

        parser = virtctl_parser()
        parser.prog = "virtctl"
    else:
        from pykubevirt.cli.main import build_parser

        parser = build_parser()
    text: str = shtab.complete(parser, shell=shell)
    return text


def run(args: argparse.Namespace) -> int:
    print(script(args.command_name, args.shell), end="")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("completion", help="print a bash or zsh completion script for pykubevirt or virtctl")
    parser.add_argument("shell", choices=SHELLS)
    parser.add_argument(
        "--command", dest="command_name", choices=COMMANDS, default="pykubevirt", help="which command to complete"
    )
    parser.set_defaults(func=run)
