"""Rebuild a Docker build's file system from the Dockerfile, without a Docker engine.

Only what docker/Dockerfile uses is understood (WORKDIR, COPY from the build context, CMD);
anything else that would change the copied files (``COPY --from``, ``ADD``) is refused, so
the rebuilt tree can never silently differ from what ``docker build`` would produce.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath


class DockerfileError(ValueError):
    """A Dockerfile instruction this rebuild cannot reproduce faithfully."""


@dataclass(slots=True)
class Copy:
    sources: list[str]
    dest: str
    workdir: str


@dataclass(slots=True)
class Dockerfile:
    copies: list[Copy] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    workdir: str = "/"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with comments dropped and ``\\`` continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continuation are ignored by Docker too
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, args = full.partition(" ")
        out.append((word.upper(), args.strip()))
    if pending.strip():
        word, _, args = pending.strip().partition(" ")
        out.append((word.upper(), args.strip()))
    return out


def _args(args: str) -> list[str]:
    if args.startswith("["):
        value = json.loads(args)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise DockerfileError(f"expected a JSON array of strings, got {args!r}")
        return value
    return shlex.split(args)


def parse(text: str) -> Dockerfile:
    df = Dockerfile()
    for word, args in _instructions(text):
        if word == "WORKDIR":
            df.workdir = str(PurePosixPath(df.workdir) / args)
        elif word == "COPY":
            parts = _args(args)
            flags = [p for p in parts if p.startswith("--")]
            parts = [p for p in parts if not p.startswith("--")]
            if any(f.startswith(("--from", "--link", "--parents")) for f in flags):
                raise DockerfileError(f"COPY {' '.join(flags)} cannot be rebuilt here")
            if len(parts) < 2:
                raise DockerfileError(f"COPY needs a source and a destination: {args!r}")
            df.copies.append(Copy(parts[:-1], parts[-1], df.workdir))
        elif word == "ADD":
            raise DockerfileError("ADD cannot be rebuilt here; use COPY")
        elif word == "RUN":
            df.runs.append(args)
        elif word == "CMD":
            df.cmd = _args(args)
    return df


def _ignored(context: Path, dockerfile: Path | None) -> list[str]:
    """The ignore patterns BuildKit applies: ``<Dockerfile>.dockerignore`` beside the
    Dockerfile when there is one, else ``.dockerignore`` at the context root."""
    ignore = context / ".dockerignore"
    if dockerfile is not None and dockerfile.with_name(dockerfile.name + ".dockerignore").exists():
        ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    if not ignore.exists():
        return []
    return [
        line.strip().rstrip("/")
        for line in ignore.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def materialize(df: Dockerfile, context: Path, root: Path, dockerfile: Path | None = None) -> None:
    """Copy what each COPY names from ``context`` into ``root`` (the image's ``/``), with
    Docker's rules: a directory's contents are copied, not the directory itself; ignored
    paths (see :func:`_ignored`) are left out."""
    patterns = _ignored(context, dockerfile)
    if any(p.startswith("!") for p in patterns):
        raise DockerfileError(".dockerignore exceptions (!) are not supported here")

    def skip(rel: str) -> bool:
        # "**/x" also matches "x" at the top, as in Docker; fnmatch's "*" crosses "/".
        return any(
            fnmatch.fnmatch(rel, p)
            or rel.startswith(p + "/")
            or (p.startswith("**/") and fnmatch.fnmatch(rel, p[3:]))
            for p in patterns
        )

    def ignore(src: str, names: list[str]) -> set[str]:
        rel = os.path.relpath(src, context)
        return {n for n in names if skip(os.path.normpath(os.path.join(rel, n)))}

    for c in df.copies:
        dest = PurePosixPath(c.workdir) / c.dest
        target = root / str(dest).lstrip("/")
        matches: list[Path] = []
        for s in c.sources:
            found = sorted(glob.glob(str(context / s)))
            found = [f for f in found if not skip(os.path.relpath(f, context))]
            if not found:
                raise DockerfileError(f"COPY source {s!r} does not exist in the build context")
            matches += [Path(f) for f in found]
        as_dir = c.dest.endswith("/") or len(matches) > 1 or target.is_dir()
        for m in matches:
            if m.is_dir():
                shutil.copytree(m, target, dirs_exist_ok=True, ignore=ignore)
            else:
                out = target / m.name if as_dir else target
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(m, out)


def without_copy(text: str, source: str) -> str:
    """The Dockerfile text with the COPY line of ``source`` removed (for negative tests)."""
    lines = text.splitlines()
    kept = [ln for ln in lines if not (ln.startswith("COPY ") and ln.split()[1] == source)]
    if len(kept) != len(lines) - 1:
        raise AssertionError(f"expected exactly one 'COPY {source} ...' line")
    return "\n".join(kept) + "\n"


__all__ = ["Copy", "Dockerfile", "DockerfileError", "materialize", "parse", "without_copy"]
