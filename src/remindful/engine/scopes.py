"""Scopes: which project's (or the user's) a memory is, and which scopes a read sees.

Every memory has one scope, stored in its ``scope`` column:

- ``project:<key>``: a project's (:mod:`remindful.engine.projects` finds it from a directory);
- ``user``: the user's, seen from every project: preferences and rules that hold everywhere;
- none (SQL NULL, shown and selected as ``unscoped``): written where no project was known and no
  rule put it at user level (a library client of no project, a memory older than scopes with no
  directory to go by). A client working in a project never sees these; one working in none does.

Where a memory goes when its writer does not say (:func:`assign`): the project it was captured in
(the ``cwd`` or ``project_id`` in its metadata, else the writer's own project), unless
:func:`user_level` finds it is a preference or rule that holds everywhere. Those rules are meant to
be conservative: a project fact moved to user level would show in every project, while a preference
left in its project is still found there. They read only the memory itself, and each answer says
which rule decided (``remindful scopes --explain TEXT`` prints it).

Reads: a *selection* is a tuple of scopes (``None`` standing for unscoped), or None for every
memory. :func:`visible_from` is what a client working in a project sees: that project and the user
(in no project: the user and the unscoped memories). :func:`parse_selection` reads what a user
writes: ``all``, ``user``, ``unscoped``, ``project`` (the client's own), ``here`` (what the client
sees), ``project:<key or name>``, several separated by commas.

Standard library only: hook processes import it.
"""

from __future__ import annotations

import re

from remindful.engine.projects import PROJECT_PREFIX, Project, slug

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    Selection = tuple[str | None, ...]

USER = "user"
UNSCOPED = "unscoped"
ALL = "all"
#: The selection words :func:`parse_selection` takes besides ``project:<key or name>``.
WORDS = (ALL, USER, UNSCOPED, "project", "here")

# -- the user-level rules ----------------------------------------------------------------------------

#: Types whose memories may be user-level: what someone said or concluded, not what a tool did.
_STATEMENT_TYPES = frozenset({"knowledge", "conversation"})
#: Sources whose memories may be user-level (a hook's only for the user's own prompts; an
#: assistant's answer, a file's chunk or an imported memory never).
_STATEMENT_SOURCES = frozenset({"manual", "conversation", "correction", "config", "hook"})

#: Saying so of projects, not "everywhere" alone (a word of every conversation).
_SAYS_EVERYWHERE = re.compile(
    r"\b(?:in|for|across)\s+(?:every|all(?:\s+(?:of\s+)?my)?|any|each)\s+"
    r"(?:projects?|repos?|repositories|repository|codebases?)\b"
    r"|\b(?:whatever|regardless of|no matter)\s+(?:the\s+|which\s+)?(?:project|repo|repository|codebase)\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"^\W*(?:i|user|the user)\s+(?:really\s+|strongly\s+|generally\s+|usually\s+)?"
    r"(?:always|never|prefers?|hates?|dislikes?|would rather|(?:does not|doesn't|do not|don't)\s+like)\b"
    r"|^\W*(?:my|user's|the user's)\s+(?:preference|rule)\b"
    r"|^\W*user\s+instruction:\s*(?:from now on,?\s+|going forward,?\s+|in (?:the )?future,?\s+|please\s+)*"
    r"(?:always|never|don't|do not)\b",
    re.IGNORECASE,
)
_RULE = re.compile(
    r"^\W*(?:from now on,?\s+|in (?:the )?future,?\s+|please\s+)*"
    r"(?:always|never|don't ever|do not ever|(?:don't|do not)\s+(?:ever\s+)?use)\b",
    re.IGNORECASE,
)

#: What makes a statement one project's, whatever its phrasing: the project (this repo, our app, we),
#: its files and places (paths, file names, URLs, hosts and ports), its environments.
_PROJECT_WORDS = re.compile(
    r"\b(?:this|our|the|that)\s+(?:\w+\s+)?(?:repo|repository|project|codebase|code base|branch|service|app|"
    r"application|package|module|monorepo|team|company|client|cluster|pipeline|build|ci)\b"
    r"|\b(?:we|we're|we've|we'll|our|ours|us|let's|here)\b"
    r"|\b(?:staging|production|prod|database|db|deploy(?:s|ed|ing|ment)?|server|endpoint|localhost)\b",
    re.IGNORECASE,
)
_PATHISH = re.compile(
    r"(?:^|[\s\"'`(=])(?:~|\.{1,2})?/[\w.-]"  # /etc/x, ~/x, ./x, ../x
    r"|\b[\w.-]+/[\w.-]+/"  # a/b/
    r"|\b[\w-]+\.(?:py|pyi|js|jsx|ts|tsx|mjs|cjs|json|ya?ml|toml|ini|cfg|conf|md|rst|txt|lock|sh|bash|zsh|go|rs|"
    r"java|kt|rb|php|c|h|cc|cpp|hpp|cs|swift|sql|html?|css|scss|vue|svelte|env|xml|gradle|tf|proto|ipynb|csv)\b"
    r"|(?:^|[\s\"'`(])\.(?:env|git|github|gitignore|npmrc|nvmrc|venv|vscode|idea|docker\w*|eslintrc\w*|prettierrc\w*)\b"
    r"|\b[\w-]+/(?:[\w-]+)\.\w+"  # dir/file.ext
    r"|\b\w+://"  # URLs
    r"|\b(?:\d{1,3}\.){3}\d{1,3}\b"  # IPv4
    r"|\b(?:port|listens? on)\s+:?\d{2,5}\b|:\d{2,5}\b",
    re.IGNORECASE,
)
#: What makes a rule someone's business, kept where it was said: a confidential matter, a deal
#: ("Never mention the Acme merger": served to every project, it would tell them).
_CONFIDENTIAL = re.compile(
    r"\b(?:confidential|nda|ndas|merger|acquisitions?|acquir(?:e|es|ed|ing)|embargo\w*|proprietary|classified|"
    r"under wraps|unannounced|codenames?|code names?|layoffs?|lawsuits?|pricing|revenue|salar(?:y|ies))\b",
    re.IGNORECASE,
)
#: A name (of a project, a customer, a product): a capitalised word inside a sentence, other
#: than the common ones a rule for everywhere names (languages, formats, platforms).
_NAME = re.compile(r"(?<=[\s\"'`(])(?<![:.!?;]\s)[A-Z][\w.-]*")
_COMMON_NAMES = frozenset(
    {
        "I",
        "English",
        "French",
        "German",
        "Spanish",
        "Italian",
        "Portuguese",
        "Japanese",
        "Chinese",
        "Markdown",
        "JSON",
        "YAML",
        "TOML",
        "SQL",
        "HTML",
        "CSS",
        "API",
        "APIs",
        "URL",
        "URLs",
        "UTC",
        "ISO",
        "Git",
        "GitHub",
        "GitLab",
        "Python",
        "JavaScript",
        "TypeScript",
        "Rust",
        "Go",
        "Java",
        "Kotlin",
        "Swift",
        "Ruby",
        "PHP",
        "C",
        "C++",
        "Unicode",
        "ASCII",
        "UTF-8",
        "CLI",
        "CI",
        "PR",
        "PRs",
        "README",
        "TODO",
        "OK",
        "Mac",
        "macOS",
        "Linux",
        "Windows",
        "Unix",
        "Vim",
        "Emacs",
        "VS",
        "Code",
    }
)
#: Word pairs written with a slash that name no path.
_SLASH_WORDS = re.compile(
    r"\b(?:and/or|either/or|he/she|his/her|him/her|s/he|w/o|n/a|yes/no|on/off|true/false|read/write|i/o|"
    r"input/output|client/server|pros/cons|tabs/spaces)\b",
    re.IGNORECASE,
)


def user_level(
    content: str,
    *,
    type: str,
    source: str,
    metadata: Mapping[str, Any] | None = None,
    project_name: str | None = None,
) -> str | None:
    """The rule by which a memory of this ``type``, ``source`` and ``content`` is the user's, seen
    from every project; None when it stays in the project it was captured in (``project_name``:
    that project's name, whose mention keeps it there).

    At user level: what says it holds in every project ("in all my repos", "whatever the project"); a preference or
    rule the user states ("I prefer…", "User never…", "Always…", "Never…", "Don't use…"), a
    correction's lesson too when it is so phrased; a configuration change — in each case only a
    statement (knowledge or conversation, not a tool call or an answer of the assistant) that
    names nothing of a project: no path or file name, URL, host or port, no "this repo"/"our
    app"/"we", no environment (staging, production, database, server, deploy), not the project's
    name, no confidential matter (a merger, a customer, a deal, "internal") nor any other name (a
    capitalised word inside the sentence but for languages, formats and platforms), and not a
    question. A correction's rule-made lesson (``Use "X" rather than "Y".``)
    stays in its project: whether it corrects wording or a project's command, its words do not
    say."""
    if type not in _STATEMENT_TYPES or source not in _STATEMENT_SOURCES:
        return None
    meta = metadata or {}
    if source == "hook" and meta.get("role") != "user":
        return None
    if len(content) > 2000:  # a document, a log: no one statement
        return None
    text = " ".join(content.split())
    if not text or len(text) > 600 or text.endswith("?"):
        return None
    # The phrasing first (most texts state no rule: one pass of a few anchored patterns), then
    # what would keep a rule in its project.
    if _SAYS_EVERYWHERE.search(text):
        rule = "says it holds in every project"
    elif source == "config":
        rule = "a preference the user set in a configuration"
    elif _PREFERENCE.search(text):
        rule = "a preference or rule the user states"
    elif _RULE.search(text):
        rule = "a rule stated as always/never"
    else:
        return None
    if project_name and len(slug(project_name)) > 2 and re.search(rf"\b{re.escape(project_name)}\b", text, re.I):
        return None
    if rule.startswith("says"):
        return rule
    bare = _SLASH_WORDS.sub(" ", text)
    if _PROJECT_WORDS.search(bare) or _PATHISH.search(bare) or _CONFIDENTIAL.search(bare):
        return None
    if any(name.rstrip(".,;:!") not in _COMMON_NAMES for name in _NAME.findall(bare)):
        return None  # it names a project, a customer, a product: theirs, not every project's
    return rule


def assign(
    content: str,
    *,
    type: str,
    source: str,
    metadata: Mapping[str, Any] | None,
    project: Project | None,
    classify: bool = True,
) -> tuple[str | None, str]:
    """The scope of a new memory whose writer named none, and why: ``user`` when ``classify`` and
    :func:`user_level` says so, else ``project``'s scope (the project it was captured in), else
    None (unscoped)."""
    if classify:
        rule = user_level(
            content, type=type, source=source, metadata=metadata, project_name=project.name if project else None
        )
        if rule is not None:
            return USER, rule
    if project is not None:
        return project.scope, "captured in project " + project.name
    return None, "captured in no project"


def captured_in(metadata: Mapping[str, Any], resolve: Callable[[str], Project | None]) -> Project | bool | None:
    """The project a memory's metadata says it was captured in: its ``cwd`` (a hook's: the agent's
    working directory) resolved by ``resolve``, else its ``project_id`` (``capture_turn``'s: a path
    is resolved, anything else is a project's name), else the directory of its ``file_path`` (a
    Markdown file's chunk: the project the file lies in). False when the metadata says nothing."""
    cwd = metadata.get("cwd")
    if isinstance(cwd, str) and cwd.strip():
        return resolve(cwd)
    named = metadata.get("project_id")
    if isinstance(named, str) and named.strip():
        if named.startswith(("/", "~")):
            return resolve(named)
        try:
            return Project.named(named)
        except ValueError:
            return False
    path = metadata.get("file_path")
    if isinstance(path, str) and path.startswith(("/", "~")):
        return resolve(path.rpartition("/")[0] or "/")
    return False


class Assigner:
    """The scopes of new memories under one set of settings: ``resolve`` finds the project of a
    directory (a :class:`~remindful.engine.projects.Resolver`), ``classify`` says whether
    :func:`user_level` runs (``scopes.user_level``)."""

    def __init__(self, resolve: Callable[[str], Project | None], *, classify: bool = True) -> None:
        self.resolve = resolve
        self.classify = classify

    def __call__(
        self,
        content: str,
        *,
        type: str,
        source: str,
        metadata: Mapping[str, Any],
        project: Project | None = None,
    ) -> tuple[str | None, Project | None]:
        """The scope of a memory whose writer named none (:func:`assign`), and the project it was
        captured in: the one its metadata names (:func:`captured_in`), else ``project`` (the
        writer's)."""
        found = captured_in(metadata, self.resolve)
        where = project if found is False else found if isinstance(found, Project) else None
        scope, _why = assign(
            content, type=type, source=source, metadata=metadata, project=where, classify=self.classify
        )
        return scope, where


# -- reads ---------------------------------------------------------------------------------------


def visible_from(project: Project | None) -> Selection:
    """What a client working in ``project`` sees: that project and the user; in no project, the
    user and the unscoped memories."""
    return (project.scope, USER) if project is not None else (USER, None)


def in_index(scope: str | None, *, private_indexed: bool) -> bool:
    """Whether a memory of ``scope`` has its vector in the vector index: every memory's where the
    index takes private ones (``CatalogBackend.indexes_private``), else every one but a private
    memory's (a team store's: it stays in the catalog)."""
    return private_indexed or scope != USER


def check_scope(value: Any, field: str = "scope") -> str:
    """``value`` as a stored scope (``user`` or ``project:<key>``, the key as :func:`slug` makes
    it); ValueError naming ``field`` otherwise."""
    if value == USER:
        return USER
    if isinstance(value, Project):
        return value.scope
    if isinstance(value, str) and value.startswith(PROJECT_PREFIX):
        key = value[len(PROJECT_PREFIX) :]
        if key and slug(key) == key:
            return value
    raise ValueError(
        f"{field}: expected 'user' or 'project:<key>' (lower-case letters, digits, '.', '_', '-'), got {value!r}"
    )


def parse_selection(
    value: str | Project | Sequence[str | Project | None] | None,
    *,
    current: Project | None,
    lookup: Callable[[str], str | None],
    field: str = "scope",
) -> Selection | None:
    """The selection ``value`` names (see the module docstring): None for every memory. ``current``
    is the client's project (``project``, ``here``); ``lookup(name)`` gives the scope of a known
    project by key or name (None if none or several match). ValueError naming ``field`` for
    anything else."""
    if value is None:
        return None
    if isinstance(value, str):
        items: Sequence[Any] = value.split(",")
    elif isinstance(value, Project):
        items = [value]
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise ValueError(f"{field}: expected a scope or a list of scopes, got {type(value).__name__}")
    chosen: list[str | None] = []
    for item in items:
        if item is None:
            chosen.append(None)
            continue
        if isinstance(item, Project):
            chosen.append(item.scope)
            continue
        if not isinstance(item, str):
            raise ValueError(f"{field}: expected scope names, got {type(item).__name__}")
        word = item.strip()
        lowered = word.lower()
        if lowered == ALL:
            return None
        if lowered == USER:
            chosen.append(USER)
        elif lowered in (UNSCOPED, "none"):
            chosen.append(None)
        elif lowered in ("project", "here"):
            if lowered == "here":
                chosen += visible_from(current)
            elif current is None:
                raise ValueError(f"{field}: 'project' means the project this runs in, and it runs in none")
            else:
                chosen.append(current.scope)
        elif lowered.startswith(PROJECT_PREFIX) and word[len(PROJECT_PREFIX) :].strip():
            name = word[len(PROJECT_PREFIX) :].strip()
            found = lookup(name)
            if found is None:
                raise ValueError(f"{field}: no project {name!r} holds memories (`remindful scopes` lists them)")
            chosen.append(found)
        else:
            raise ValueError(f"{field}: expected all, user, unscoped, project, here or project:<name>, got {word!r}")
    return tuple(dict.fromkeys(chosen))


def describe(selection: Selection | None) -> str:
    """A selection as :func:`parse_selection` reads it back (``all`` for every memory)."""
    if selection is None:
        return ALL
    return ",".join(UNSCOPED if s is None else s for s in selection) or "nothing"


__all__ = [
    "ALL",
    "UNSCOPED",
    "USER",
    "WORDS",
    "Assigner",
    "assign",
    "captured_in",
    "check_scope",
    "describe",
    "in_index",
    "parse_selection",
    "user_level",
    "visible_from",
]
