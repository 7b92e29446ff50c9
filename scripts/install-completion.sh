#!/usr/bin/env bash
# Shell completion for pykubevirt and virtctl, into a venv: bash scripts under share/bash-completion/completions,
# zsh functions under share/zsh/site-functions, and a hook in bin/activate that loads them. Idempotent.
# Usage: scripts/install-completion.sh [VENV]   (PYKUBEVIRT overrides the command that generates the scripts)
set -euo pipefail

VENV=${1:-.venv}
PYKUBEVIRT=${PYKUBEVIRT:-$VENV/bin/pykubevirt}
BASH_DIR=$VENV/share/bash-completion/completions
ZSH_DIR=$VENV/share/zsh/site-functions
mkdir -p "$BASH_DIR" "$ZSH_DIR"
for cmd in pykubevirt virtctl; do
  # Generated into a temporary file first: a failed run leaves the previous script in place.
  $PYKUBEVIRT completion bash --command "$cmd" >"$BASH_DIR/$cmd.tmp" && mv "$BASH_DIR/$cmd.tmp" "$BASH_DIR/$cmd"
  $PYKUBEVIRT completion zsh --command "$cmd" >"$ZSH_DIR/_$cmd.tmp" && mv "$ZSH_DIR/_$cmd.tmp" "$ZSH_DIR/_$cmd"
done

MARKER="# pykubevirt: shell completion"
if ! grep -qF "$MARKER" "$VENV/bin/activate"; then
  cat >>"$VENV/bin/activate" <<'HOOK'

# pykubevirt: shell completion for pykubevirt and virtctl (scripts/install-completion.sh)
if [ -n "${BASH_VERSION:-}" ]; then
    for _pykubevirt_completion in "$VIRTUAL_ENV"/share/bash-completion/completions/*; do
        . "$_pykubevirt_completion"
    done
    unset _pykubevirt_completion
elif [ -n "${ZSH_VERSION:-}" ]; then
    fpath=("$VIRTUAL_ENV/share/zsh/site-functions" $fpath)
    if (( $+functions[compdef] )); then
        autoload -Uz _pykubevirt _virtctl
        compdef _pykubevirt pykubevirt
        compdef _virtctl virtctl
    fi
fi
HOOK
fi
