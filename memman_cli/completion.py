"""Shell completion for the ``memman`` command, written from its argparse parser.

    source <(memman completion bash)      # ~/.bashrc
    source <(memman completion zsh)       # ~/.zshrc, after compinit
    memman completion fish > ~/.config/fish/completions/memman.fish

Sub-commands and their flags come from the parser itself, so a new flag completes without
touching this file; ``memman call`` completes the protocol's method names, and the commands
that take a SESSION (``show``, ``context``, ``export``, ``expand``) complete the ids of the
running daemon's sessions (``memman sessions --ids``; nothing when no daemon answers).
"""

from __future__ import annotations

import argparse

from memman import api


def _commands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """name -> (help, sub-parser), in the parser's order."""
    out: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                out[name] = (helps.get(name, ""), sub)
    return out


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings if s.startswith("--")]


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    return [str(c) for a in parser._actions if not a.option_strings and a.choices
            and not isinstance(a, argparse._SubParsersAction) for c in a.choices]


#: the commands whose first argument is a session id
SESSION_COMMANDS = ("show", "context", "export", "expand")
_IDS = "memman sessions --ids 2>/dev/null"


def _words(cmd: str, sub: argparse.ArgumentParser) -> list[str]:
    """What completes after ``memman <cmd>``: flags, fixed choices, nested commands, methods."""
    words = _flags(sub) + _choices(sub) + list(_commands(sub))
    if cmd == "call":
        words += [m.name for m in api.METHODS]
    return words


def _bash(parser: argparse.ArgumentParser) -> str:
    cmds = _commands(parser)
    cases = "\n".join(f'        {c}) words="{" ".join(_words(c, sub))}" ;;'
                      for c, (_, sub) in cmds.items())
    top = " ".join([*_flags(parser), *cmds])
    return f"""# memman bash completion: source <(memman completion bash)
_memman() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" cmd="" words i
    case "$prev" in
        --socket|-o|--output|--config|--dest) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --socket) ((i++)) ;;
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    case "$cmd" in
        "") words="{top}" ;;
{cases}
        *) words="" ;;
    esac
    case "$cmd" in
        {"|".join(SESSION_COMMANDS)}) [[ "$cur" != -* ]] && words="$words $({_IDS})" ;;
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _memman memman
"""


def _zsh(parser: argparse.ArgumentParser) -> str:
    cmds = _commands(parser)
    described = "\n".join(f"        '{c}:{h.replace(chr(39), '')}'" for c, (h, _) in cmds.items())
    cases = "\n".join(
        f"        {c}) compadd -- {' '.join(_words(c, sub))}"
        + (f"; compadd -- ${{(f)\"$({_IDS})\"}}" if c in SESSION_COMMANDS else "") + " ;;"
        for c, (_, sub) in cmds.items())
    return f"""#compdef memman
# memman zsh completion: source <(memman completion zsh)   (after compinit)
_memman() {{
    local -a commands
    commands=(
{described}
    )
    if (( CURRENT == 2 )); then
        _describe 'memman command' commands
        compadd -- {' '.join(_flags(parser))}
        return
    fi
    case ${{words[2]}} in
{cases}
    esac
    _files
}}
compdef _memman memman
"""


def _fish(parser: argparse.ArgumentParser) -> str:
    cmds = _commands(parser)
    lines = ["# memman fish completion: memman completion fish > ~/.config/fish/completions/memman.fish",
             "complete -c memman -f"]
    for flag in _flags(parser):
        lines.append(f"complete -c memman -n __fish_use_subcommand -l {flag[2:]}")
    for c, (h, sub) in cmds.items():
        desc = h.replace("'", "")
        lines.append(f"complete -c memman -n __fish_use_subcommand -a {c} -d '{desc}'")
        cond = f"'__fish_seen_subcommand_from {c}'"
        for flag in _flags(sub):
            lines.append(f"complete -c memman -n {cond} -l {flag[2:]}")
        plain = [w for w in _words(c, sub) if not w.startswith("-")]
        if plain:
            lines.append(f"complete -c memman -n {cond} -a '{' '.join(plain)}'")
        if c in SESSION_COMMANDS:
            lines.append(f"complete -c memman -n {cond} -a '({_IDS})'")
    return "\n".join(lines) + "\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](parser)
