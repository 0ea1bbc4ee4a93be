"""How the guide quotes a fact, for the build (the repository's tools/lab/) and for the notebooks alike: the
placeholder a template writes, its key in docs/lab/facts.json, the commands that make a source as the guide
prints them, and the `made` text of a source's stamp.

    {{experiments/ablation: no-mask / best val loss}}         a fact (see `tinyformer.lab.sources`)
    {{experiments/kv-cache: 128 / cache speedup | .2f}}       ... formatted with a Python format spec
    ![val loss]({{fig experiments/ablation: val_loss.png}})   a figure
    {{text lab/gpt-sample: stdout.txt}}                       a text file, verbatim
"""

from __future__ import annotations

import re
import shlex

from tinyformer.lab.sources import SOURCES

PLACEHOLDER = re.compile(r"\{\{\s*(?:(fig|text)\s+)?([\w./-]+)\s*:\s*([^{}|]+?)\s*(?:\|\s*([^{}]*?)\s*)?\}\}")


def key(m: re.Match) -> str:
    """A placeholder's name in facts.json: its text, spaces normalised."""
    return " ".join(m.group(0)[2:-2].split())


def shown(name: str) -> str:
    """The commands a reader runs to make a source, as the guide prints them."""
    source = SOURCES[name]
    lines = [command_text(a, "runs", f"runs/{source.path}") for a in source.argv(False)]
    return ", ".join(f"`tinyformer {line}`" for line in lines)


SHELL_SPECIAL = re.compile(r"""[\s<>|&;()*?\[\]#$`"'\\!{}]""")  # what a shell would read as more than text


def command_text(argv: list[str], runs: str, folder: str) -> str:
    """A command line with its folders filled in, quoted as a shell would need it: `"a b"`, and
    `"train.stop_at=exact_match>=0.99"`, whose `>` a shell would otherwise take for a redirection."""
    args = [a.replace("{dir}", folder).replace("{runs}", runs).replace("{nanogpt}", "~/nanoGPT") for a in argv]
    return " ".join(_quoted(a) for a in args)


def _quoted(arg: str) -> str:
    if arg and not SHELL_SPECIAL.search(arg):
        return arg
    return f'"{arg}"' if not re.search(r'["$`\\!]', arg) else shlex.quote(arg)


def made_text(record: dict, changed: list[str] | None) -> str:
    """The `made` fact: the commit and date a source's facts come from (its stamp, written by the build), then
    what its last check by behaviour found (`record["checked"]`, `make lab VERIFY=1`): `stale` when its CI-size
    build moved, or when its code (`changed`: the files, as the build found them) changed since it was made or
    last checked; else `behaviour unchanged through` the commit checked."""
    if not record.get("commit"):
        return "not stamped (made before the lab stamped its facts)"
    text = f"{record['commit'][:7]}{'+' if record.get('dirty') else ''}, {record['date'][:10]}"
    checked = record.get("checked") or {}
    if checked.get("moved"):
        what = checked["moved"]
        more = f" and {len(what) - 3} more" if len(what) > 3 else ""
        return f"{text}, stale: behaviour changed by {checked['commit'][:7]} ({'; '.join(what[:3])}{more})"
    if changed:
        files = f"{len(changed)} file{'s' if len(changed) > 1 else ''}"
        if checked:
            return f"{text}, stale: {files} of its code changed since {checked['commit'][:7]}, not checked"
        return f"{text}, stale: {files} of its code changed since"
    if checked:
        return f"{text}, behaviour unchanged through {checked['commit'][:7]}"
    return text
