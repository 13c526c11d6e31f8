"""Which project a directory belongs to: the project resolver (standard library only: hook
processes import it, and it must cost them a few ``stat`` calls, not a ``git`` process).

A project is found by walking up from the directory, the nearest of these winning:

1. a directory named in ``scopes.projects`` (``{"/path/to/dir": "name"}``): that name; or one the
   user bound with ``remindful scopes bind DIR PROJECT`` (the store's registry): that project;
2. a ``.remindful`` marker file: the ``project = NAME`` (or ``project: NAME``) line in it names the
   project; a marker without one makes its directory a project of its own. A marker is a file any
   cloned repository can ship, so it cannot claim a project that is already another directory's
   (see *Claims* below): such a marker is refused, its directory a project of its own;
3. ``.git`` (a directory, or a file pointing to one): the repository, identified by its *common*
   git directory, so the worktrees of one repository (whose ``.git`` files point into
   ``<repo>/.git/worktrees/<name>``, with a ``commondir`` back to ``<repo>/.git``) are one project.
   A submodule (``.git`` pointing into ``<parent>/.git/modules/<name>``, no ``commondir``) is a
   project of its own. A repository whose work tree is the home directory (a dotfiles repository)
   counts as none: it would make every folder under the home one project. On a shared store
   (``by_remote``: the catalog on a server) a repository whose ``origin`` remote has a URL is
   identified by that URL instead, normalised (:func:`remote_identity`: scheme, user and a trailing
   ``.git`` dropped, ``host:path`` made ``host/path``) and named by its last part, so two clones
   on two machines are one project.

With ``scopes.project`` set (``REMINDFUL_SCOPES__PROJECT`` for one process) every directory is that
project. Else a directory in none of the above is its own project, except the home directory and
the filesystem root, which are none (None): a client working there is in no project.

Keys: a named project's key is its name in lower case, runs of other characters than letters,
digits, ``.``, ``_`` and ``-`` made one ``-`` (two directories named alike are one project: that is
what naming is for); a repository's or a directory's is its name so reduced, ``-`` and the first 8
hex digits of the SHA-256 of its common git directory's (or the directory's) real path: stable as
long as the repository stays where it is (moved, it is a new project unless a marker names it).
A store's resolver makes keys of names its write-boundary redaction has passed (``clean``), so a
secret in a directory's name reaches neither the key nor the recorded name and root.
Claims: a project is who it is by its place, never by a name a checked-in file says. With a
registry (the store's: the ``projects`` the catalog recorded and the user's bindings), a marker's
name is honoured only when the project it names is bound to no other directory: none is recorded
for it, or the one recorded is the marker's own. A name shaped like a place's key (``name-`` and 8
hex digits, computable from a guessed path) is honoured only when recorded with the marker's
directory. A refused marker is noted in :attr:`Resolver.refused` (what ``remindful scopes`` says,
with the command that binds the directory if the project is the user's).

The scope of a project's memories is ``project:<key>`` (:mod:`remindful.engine.scopes`); the same
key is a hook memory's ``project_id``, the ledger's project and what ``hooks.projects`` matches.
"""

from __future__ import annotations

import os
import re
import time

try:  # the built-in module: hashlib would load OpenSSL, which costs hook processes milliseconds
    from _sha256 import sha256
except ImportError:  # pragma: no cover - other Python builds
    from hashlib import sha256

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Protocol

    class Registry(Protocol):
        """What a store knows of projects, for the resolver (its catalog's ``projects`` and the
        user's bindings: :class:`remindful.engine.repositories.scopes.ScopeRepository`)."""

        def project_root(self, key: str) -> str | None:
            """The directory recorded for the project ``key`` ("" when known by name only), or
            None when none is recorded."""

        def bindings(self) -> Mapping[str, tuple[str, str]]:
            """The user's bindings: directory (its real path, redacted as a project's root is) →
            (project key, project name)."""


MARKER = ".remindful"
PROJECT_PREFIX = "project:"
#: A marker file larger than this is not read (it is a marker, not a document).
MARKER_MAX_BYTES = 4096
#: How long a resolved directory is remembered by a process (a marker or a repository may appear).
CACHE_S = 30.0
_MARKER_LINE = re.compile(r"^\s*(?:project|name)\s*[:=]\s*[\"']?([^\"'#\n]+?)[\"']?\s*(?:#.*)?$", re.MULTILINE)
_NOT_KEY = re.compile(r"[^a-z0-9._-]+")
#: A key as :meth:`Project.at` makes it (a place's): a marker naming one is a guess at a path.
_PLACE_KEY = re.compile(r"-[0-9a-f]{8}$")


class Project:
    """A project: ``key`` (its stable id, see the module docstring), ``name`` (what to show) and
    ``root`` (the directory that identifies it: the repository's main work tree, the marked or
    named directory; "" for a project known by name only)."""

    __slots__ = ("key", "name", "root")

    def __init__(self, key: str, name: str, root: str = "") -> None:
        self.key, self.name, self.root = key, name, root

    @property
    def scope(self) -> str:
        """The scope of its memories: ``project:<key>``."""
        return PROJECT_PREFIX + self.key

    @classmethod
    def named(cls, name: str, root: str = "") -> Project:
        """The project a name gives (a marker, a setting, ``capture_turn``'s ``project_id``)."""
        name = " ".join(str(name).split())
        key = slug(name)
        if not key:
            raise ValueError(f"project name {name!r}: expected letters or digits")
        return cls(key, name, root)

    @classmethod
    def at(cls, identity: str, name: str, root: str) -> Project:
        """The project identified by the path ``identity`` (a common git directory, or a directory)."""
        digest = sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:8]
        return cls(f"{slug(name) or 'project'}-{digest}", name or "/", root)

    def to_dict(self) -> dict[str, str]:
        return {"scope": self.scope, "key": self.key, "name": self.name, "root": self.root}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Project) and (self.key, self.name, self.root) == (other.key, other.name, other.root)

    def __hash__(self) -> int:
        return hash((self.key, self.name, self.root))

    def __repr__(self) -> str:
        return f"Project({self.key!r}, {self.name!r}, {self.root!r})"


def slug(name: str) -> str:
    """``name`` as a key: lower case, other characters than letters, digits, ``._-`` made ``-``."""
    return _NOT_KEY.sub("-", name.strip().lower()).strip("-.")[:80]


class Resolver:
    """Projects of directories under one set of settings (``fixed``: ``scopes.project``; ``names``:
    ``scopes.projects``), each directory's answer remembered for :data:`CACHE_S` seconds.

    ``clean``: what a project's name and root directory go through before the key is made of them
    (the store's write-boundary redaction: a secret in a directory's or a marker's name must not
    reach the key, which is stored in every memory's scope); the identity hashed into a key is
    the real path, as found."""

    def __init__(
        self,
        fixed: str | None = None,
        names: Mapping[str, str] | None = None,
        clean: Callable[[str], str] | None = None,
        registry: Callable[[], Registry | None] | None = None,
        *,
        by_remote: bool = False,
    ) -> None:
        """``registry``: gives the store's :class:`Registry` (None while there is none: a marker is
        then taken at its word, as without a store). ``by_remote``: a repository is known by its
        ``origin`` URL where it has one (a store shared by several machines)."""
        self._by_remote = by_remote
        self._clean = clean if clean is not None else _same
        self.fixed = Project.named(self._clean(fixed)) if fixed else None
        self.names = {_real(os.path.expanduser(path)): name for path, name in (names or {}).items()}
        self._registry = registry
        self._home = _real(os.path.expanduser("~"))
        self._cache: dict[str, tuple[float, Project | None]] = {}
        #: Markers refused (see the module docstring): the marker's directory → (the key it named,
        #: the directory that project is bound to; "" when it is a place's key recorded nowhere).
        self.refused: dict[str, tuple[str, str]] = {}

    def forget(self) -> None:
        """Drop the remembered answers (after a binding changed)."""
        self._cache.clear()

    def __call__(self, directory: str | os.PathLike[str] | None) -> Project | None:
        """The project of ``directory`` (None: no project, or no directory given)."""
        if self.fixed is not None:
            return self.fixed
        if directory is None or not str(directory).strip():
            return None
        given = os.fspath(directory)
        now = time.monotonic()
        known = self._cache.get(given)  # as given: resolving links costs a stat per path component
        if known is not None and now - known[0] < CACHE_S:
            return known[1]
        found = self._resolve(_real(os.path.expanduser(given)))
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[given] = (now, found)
        return found

    def _resolve(self, path: str) -> Project | None:
        registry = self._registry() if self._registry is not None else None
        bound = registry.bindings() if registry is not None else {}
        current = path
        while True:
            clean = self._clean
            named = self.names.get(current)
            if named:
                return Project.named(clean(named), clean(current))
            root = clean(current) if bound else None
            if root is not None and root in bound:
                key, name = bound[root]
                return Project(key, name, root)
            marked = _marker(current)
            if marked is not None:
                if not marked:
                    return self._at(current, current)
                claimed = Project.named(clean(marked), clean(current))
                if registry is None or self._may_claim(registry, claimed, current):
                    return claimed
                return self._at(current, current)
            repository = _repository(current)
            if repository is not None and repository[2] != self._home:
                identity, name, root = repository
                remote = _origin_url(identity) if self._by_remote else None
                if remote:
                    return Project.at("remote:" + remote, clean(remote.rsplit("/", 1)[-1]), clean(root))
                return Project.at(identity, clean(name), clean(root))
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        if path in (self._home, os.path.dirname(path)):  # the home directory, the root
            return None
        return self._at(path, path)

    def _may_claim(self, registry: Registry, claimed: Project, directory: str) -> bool:
        """Whether a marker in ``directory`` may name ``claimed`` (see *Claims*); a refusal is
        noted in :attr:`refused`."""
        root = registry.project_root(claimed.key)
        if root == claimed.root or (root in (None, "") and not _PLACE_KEY.search(claimed.key)):
            self.refused.pop(directory, None)
            return True
        self.refused[directory] = (claimed.key, root or "")
        return False

    def _at(self, identity: str, root: str) -> Project:
        return Project.at(identity, self._clean(_base(root)), self._clean(root))


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _base(path: str) -> str:
    return os.path.basename(path.rstrip(os.sep)) or path


def _marker(directory: str) -> str | None:
    """The name in ``directory``'s marker file ("" when it names none), or None without a marker
    (a directory named ``.remindful``, such as the default storage's parent, is no marker)."""
    path = os.path.join(directory, MARKER)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            text = f.read(MARKER_MAX_BYTES).decode("utf-8", "replace")
    except OSError:  # unreadable: no marker
        return None
    found = _MARKER_LINE.search(text)
    return found.group(1).strip() if found and slug(found.group(1)) else ""


def _same(text: str) -> str:
    return text


def _repository(directory: str) -> tuple[str, str, str] | None:
    """The repository whose work tree ``directory`` is the top of, as ``(identity, name, root)``
    (what :meth:`Project.at` takes), or None."""
    dot_git = os.path.join(directory, ".git")
    if os.path.isdir(dot_git):
        common = _common_dir(dot_git)
    elif os.path.isfile(dot_git):
        try:
            with open(dot_git, encoding="utf-8", errors="replace") as f:
                first = f.read(4096).strip()
        except OSError:
            return None
        if not first.startswith("gitdir:"):
            return None
        git_dir = os.path.join(directory, first[len("gitdir:") :].strip())
        common = _common_dir(_real(git_dir))
    else:
        return None
    # The main work tree of a repository is the common directory's parent (``<root>/.git``); a
    # bare repository (``name.git``) or a submodule (``.git/modules/name``) is named by that
    # directory, so that every work tree of it gets the same key.
    if os.path.basename(common) == ".git":
        root = os.path.dirname(common)
        return common, _base(root), root
    return common, _base(common).removesuffix(".git") or _base(directory), directory


def remote_identity(url: str) -> str:
    """A remote URL as every clone of the repository gives it: ``https://user@host/org/repo.git``,
    ``ssh://git@host/org/repo``, ``git@host:org/repo.git`` all make ``host/org/repo`` (the host in
    lower case); "" for a URL that names nothing."""
    url = url.strip()
    if "://" in url:
        url = url.split("://", 1)[1]
    elif ":" in url.split("/", 1)[0]:  # scp-like: [user@]host:path
        url = url.replace(":", "/", 1)
    host, _, path = url.partition("/")
    host = host.rsplit("@", 1)[-1].lower()
    path = path.strip("/").removesuffix(".git").strip("/")
    return f"{host}/{path}" if host and path else ""


#: A section header of a git config file, and a ``url = …`` line.
_SECTION = re.compile(r'^\s*\[\s*([^\s\]"]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]')
_URL_LINE = re.compile(r"^\s*url\s*=\s*(.*?)\s*$", re.IGNORECASE)


def _origin_url(common: str) -> str | None:
    """The normalised URL of the ``origin`` remote in the common git directory ``common``'s
    ``config`` (read as a file: no git process), or None without one."""
    try:
        with open(os.path.join(common, "config"), encoding="utf-8", errors="replace") as f:
            text = f.read(65536)
    except OSError:
        return None
    in_origin = False
    for line in text.splitlines():
        section = _SECTION.match(line)
        if section:
            in_origin = section.group(1).lower() == "remote" and section.group(2) == "origin"
            continue
        found = _URL_LINE.match(line) if in_origin else None
        if found:
            return remote_identity(found.group(1).strip('"')) or None
    return None


def _common_dir(git_dir: str) -> str:
    """The common git directory of ``git_dir``: the one its ``commondir`` file names (a worktree's
    points back to the repository's), else itself."""
    try:
        with open(os.path.join(git_dir, "commondir"), encoding="utf-8", errors="replace") as f:
            named = f.read(4096).strip()
    except OSError:
        return _real(git_dir)
    return _real(os.path.join(git_dir, named)) if named else _real(git_dir)


__all__ = ["MARKER", "PROJECT_PREFIX", "Project", "Resolver", "remote_identity", "slug"]
