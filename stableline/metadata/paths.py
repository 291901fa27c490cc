"""Metadata paths: `/a/b/c`, slash-separated, no empty segment, no trailing slash.

A path is a key; "children" are the next segments of the keys below it, whether or
not the path itself is a key (directories are implicit, as in etcd).
"""

from __future__ import annotations

from stableline.metadata.errors import InvalidPath


def check_path(path: str) -> str:
    """`path` unchanged if it is a valid key path, else InvalidPath."""
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or path == "/"
        or path.endswith("/")
        or "//" in path
        or "\0" in path
    ):
        raise InvalidPath(
            f"metadata path {path!r} is not /segment[/segment...] (no empty segment, "
            f"no trailing slash)"
        )
    return path


def check_prefix(prefix: str) -> str:
    """A watch or listing prefix: "/" or a valid path."""
    return prefix if prefix == "/" else check_path(prefix)


def children_prefix(path: str) -> str:
    """What every key strictly below `path` starts with."""
    return "/" if path == "/" else check_path(path) + "/"


def child_names(prefix: str, keys: list[str]) -> list[str]:
    """The distinct next segments after `prefix` among `keys` (each starts with it), sorted."""
    names = {key[len(prefix) :].split("/", 1)[0] for key in keys}
    names.discard("")
    return sorted(names)


def under(prefix: str, path: str) -> bool:
    """Whether a watch on `prefix` covers `path` (the prefix itself or below it)."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")
