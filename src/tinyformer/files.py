"""Files in and out: writes that readers never see half of, and paths checked before any work starts.

Every write goes to a temp file, then a rename (`atomic_write`), so a kill or a full disk leaves the
previous file whole. A temp file or folder gets a new random hidden name beside its target and is created
exclusively (`fresh_name`): nothing planted at a name is ever opened, and a link at the target is replaced,
never written through. An export builds its folder beside the target and moves it in only when it is complete
(`staged_folder`); `new_folders` removes the folders a stopped command made and left empty, and `not_in_run`
keeps an export out of the run it exports. `input_file` and `output_path` check a path a user gave at the
start of a command, saying what it is when it is not what is needed (a folder, a named pipe, a symlink loop, a
read-only place). The lowest layer of the package: checkpoints, plots, reports and exports use it.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import secrets
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tinyformer import interrupt
from tinyformer.errors import UserError


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` then rename tmp over `path`: readers never see half a file.

    `tmp` is a new hidden file beside `path` (`fresh_name`); a link at `path` is replaced by the file, never
    written through. An OSError (full disk, no permission, a folder in the way) is a UserError naming the path;
    on any exception (Ctrl-C too) the file that was there before is untouched and the temp file is removed.
    """
    path, tmp = Path(path), None
    try:
        tmp = fresh_name(path, new_file)
        write(tmp)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise UserError(f"cannot write {str(path)!r}: {reason(e)}") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def fresh_name(path: Path, make: Callable[[Path], None]) -> Path:
    """A new hidden name beside `path`, `.NAME.RANDOM.tmp`, made by `make`: `new_file` or `os.mkdir`, which fail on
    a name already taken (a planted link too, never followed), and then another name is tried."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name[:100]}.{secrets.token_hex(6)}.tmp")
        try:
            make(tmp)
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temp name", str(path))


def new_file(path: Path) -> None:
    """Create the empty file `path`, exclusively (O_EXCL: a link there is not followed), with the umask's mode."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666))


@contextlib.contextmanager
def new_folders(folder: Path, make: bool = True) -> Iterator[Path]:
    """`folder`, made with its missing parents (unless not `make`: the block makes it). If the block raises (a
    refusal, Ctrl-C), the folders that were missing are removed again while they are empty: a command that
    stops leaves no empty folder behind. Nothing in them is ever removed."""
    folder = Path(folder)
    missing = list(itertools.takewhile(lambda p: not os.path.lexists(p), (folder, *folder.parents)))
    try:
        yield make_dir(folder) if make else folder
    except BaseException:
        for p in missing:  # deepest first; a folder that holds anything stops it
            try:
                p.rmdir()
            except OSError:
                break
        raise


@contextlib.contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """A new hidden folder beside `out` to build an export in, moved in when the block ends without an exception:
    renamed to `out` when nothing is there or a link is (the link is replaced, never followed); into a folder
    that is there file by file (each replaces its namesake, a link too; other files stay). If the block raises,
    the temp folder is removed and `out` is as it was: nothing half made under its name."""
    out, tmp = Path(out), None
    with new_folders(out.parent):
        try:
            tmp = fresh_name(out, os.mkdir)
            yield tmp
            with held_signals():  # a few renames: all of them, or none
                move_in(tmp, out)
        except OSError as e:
            raise UserError(f"cannot write {str(out)!r}: {reason(e)}") from None
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)


def move_in(tmp: Path, out: Path) -> None:
    """The files of the folder `tmp` to `out` (see `staged_folder`)."""
    if os.path.islink(out):
        os.unlink(out)
    if not os.path.lexists(out):
        os.rename(tmp, out)
        return
    names = sorted(os.listdir(tmp))
    for name in names:  # all checked before any is moved
        if os.path.isdir(out / name) and not os.path.islink(out / name):
            raise UserError(f"{str(out / name)!r} is a folder; the export's file of that name cannot replace it")
    for name in names:
        os.replace(tmp / name, out / name)


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """SIGINT and SIGTERM held back inside the block, then delivered to the handler there was before."""
    caught: list[int] = []
    try:
        with interrupt.catching(lambda signum, frame: caught.append(signum)):
            yield
    finally:
        if caught:
            signal.raise_signal(caught[0])


def not_in_run(out: Path, run: str | Path | None) -> Path:
    """`out`, when writing it touches nothing of the run folder `run` (paths resolved, a link at `out` followed
    and not): neither the folder nor anything in it; else a UserError naming both."""
    if run is not None:
        home = Path(os.path.realpath(run))
        out, pointed = Path(out), Path(os.path.realpath(out))
        here = Path(os.path.realpath(out.parent)) / out.name if out.name != ".." else pointed
        for place in (pointed, here):
            if place == home or home in place.parents:
                raise UserError(f"{str(out)!r} is in the run folder {str(run)!r} that is exported; export outside it")
    return Path(out)


def write_text(path: Path, text: str) -> Path:
    """`text` as UTF-8 at `path`, atomically; returns the path."""
    atomic_write(Path(path), lambda t: t.write_text(text, encoding="utf-8"))
    return Path(path)


def read_text(path: Path) -> str:
    """A UTF-8 text file's contents; not UTF-8, or unreadable, is a UserError naming the file."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (bad byte at offset {e.start}); save it as UTF-8") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {reason(e)}") from None


MAX_JSON_BYTES = 256 * 2**20  # the largest JSON file read: a big BPE tokenizer.json is tens of MB
MAX_JSON_DEPTH = 64  # the deepest nesting read: what tinyformer and Hugging Face write is under 10 levels


def read_json(path: str | Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file's value, read with bounded size and depth: a missing, unreadable, oversized, non-UTF-8,
    malformed or too deeply nested file is a UserError naming it (never a RecursionError from the decoder,
    or from code that walks what it returned)."""
    try:
        size = os.stat(path).st_size
        if size > max_bytes:
            raise UserError(f"{path} is {size / 2**20:,.0f} MB, more than a file of this kind ever holds; not read")
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path} is missing") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is corrupt: not UTF-8 (bad byte at offset {e.start})") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {reason(e)}") from None
    return parse_json(text, str(path))


def parse_json(text: str, where: str) -> Any:
    """`text` as JSON, nested at most `MAX_JSON_DEPTH` levels; else a UserError naming `where`."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{where} is corrupt: {e}") from None
    except ValueError as e:  # int() refuses a number of over 4,300 digits
        raise UserError(f"{where} is corrupt: {str(e).split(':')[0]}") from None
    except RecursionError:  # the decoder recurses once per level
        value, too_deep = None, True
    else:
        too_deep = json_depth(value) > MAX_JSON_DEPTH
    if too_deep:
        raise UserError(f"{where} is nested deeper than {MAX_JSON_DEPTH} levels; no file tinyformer reads is")
    return value


def json_depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (a scalar: 0), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH:  # deeper is already too deep: no need to walk on
            todo.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def make_dir(path: Path) -> Path:
    """Create the folder `path` (and its parents) or say in one line why it cannot be."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{str(path)!r} is a file, not a folder") from None
    except OSError as e:
        raise UserError(f"cannot create the folder {str(path)!r}: {reason(e)}") from None
    return path


def reason(e: OSError) -> str:
    return {errno.ENOSPC: "the disk is full", errno.EROFS: "read-only file system"}.get(e.errno, e.strerror or str(e))


def kind(path: Path) -> str | None:
    """What `path` is: "file", "folder", "named pipe", "socket", "device", "symlink loop", None if nothing."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return "symlink loop" if e.errno == errno.ELOOP else None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "named pipe"
    return "socket" if stat.S_ISSOCK(mode) else "device"


def input_file(path: str | Path, what: str = "file") -> Path:
    """`path` if it is a regular file that can be read; otherwise a UserError saying what it is."""
    p = Path(path).expanduser()
    found = kind(p)
    if found is None:
        raise UserError(f"{what} {str(p)!r} does not exist")
    if found != "file":
        raise UserError(f"{what} {str(p)!r} is a {found}, not a file")
    if not os.access(p, os.R_OK):
        raise UserError(f"{what} {str(p)!r} cannot be read (permission denied)")
    return p


def output_path(path: str | Path, folder: bool = False) -> Path:
    """Check, before any work, that a file (or, with `folder`, a folder) can be written at `path`."""
    p = Path(path).expanduser()
    utf8_path(p)  # a run folder or output the weights library could not open, refused before training
    found, wanted = kind(p), "folder" if folder else "file"
    if found not in (None, wanted):
        raise UserError(f"{str(p)!r} is a {found}; give a {wanted} to write")
    where = (p, *p.parents) if folder else p.parents  # an existing file is overwritten: its folder must be writable
    parent = next((q for q in where if kind(q) is not None), Path("."))
    if kind(parent) != "folder":
        raise UserError(f"cannot write {str(p)!r}: {str(parent)!r} is a {kind(parent)}, not a folder")
    try:  # a real write, not os.access: root passes every permission check, yet /proc or a full disk refuse files
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".tinyformer-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(f"cannot write {str(p)!r}: {str(parent)!r} takes no new file ({reason(e)})") from None
    return p


def utf8_path(path: Path) -> str:
    """`path` as the text safetensors and matplotlib open: UTF-8 paths only. A name in another encoding (bytes
    such as b"run-\\xff", which Python holds as surrogates) is a UserError saying so, not "corrupt or truncated"."""
    if utf8(str(path)):
        return str(path)
    bad = next(part for part in Path(path).parts if not utf8(part))
    raise UserError(
        f"{shown_path(path)}: the name '{shown_path(bad)}' is not UTF-8, and the weights library (safetensors) opens "
        "UTF-8 paths only; rename it to a UTF-8 name"
    )


def utf8(text: str) -> bool:
    return not any("\ud800" <= c <= "\udfff" for c in text)  # only a surrogate has no UTF-8 form


def shown_path(path: str | Path) -> str:
    """A path as a line can print it: bytes that are not UTF-8 as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")
