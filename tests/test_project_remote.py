"""A project on a shared store is its repository's, wherever it is cloned: known by the ``origin``
remote's URL (normalised), read from the git config file without a git process."""

from __future__ import annotations

from pathlib import Path

import pytest

from remindful.engine.projects import Resolver, remote_identity


def clone(at: Path, url: str | None) -> Path:
    (at / ".git").mkdir(parents=True)
    config = '[core]\n\tbare = false\n[remote "upstream"]\n\turl = https://example.org/fork/other.git\n'
    if url is not None:
        config += f'[remote "origin"]\n\turl = {url}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n'
    (at / ".git" / "config").write_text(config)
    return at


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/Team/shop.git",
        "https://alice@github.com/Team/shop",
        "ssh://git@GitHub.com/Team/shop.git/",
        "git@github.com:Team/shop.git",
        "github.com:Team/shop",
    ],
)
def test_the_forms_of_one_remote_url_are_one_identity(url: str) -> None:
    assert remote_identity(url) == "github.com/Team/shop"


def test_bad_remote_urls_name_nothing() -> None:
    assert remote_identity("") == "" and remote_identity("https://") == "" and remote_identity("host-only") == ""


def test_two_clones_on_a_shared_store_are_one_project_and_named_by_the_remote(tmp_path: Path) -> None:
    laptop = clone(tmp_path / "laptop" / "shop", "git@github.com:team/shop.git")
    desktop = clone(tmp_path / "desktop" / "work" / "shop-main", "https://bob@github.com/team/shop")
    shared = Resolver(by_remote=True)
    a, b = shared(laptop / "src"), shared(desktop)
    assert a is not None and b is not None
    assert a.key == b.key and a.key.startswith("shop-") and a.name == "shop"
    assert (a.root, b.root) == (str(laptop.resolve()), str(desktop.resolve()))  # each machine's own place
    local = Resolver()  # the embedded default: a repository is its place
    assert local(laptop).key != local(desktop).key


def test_a_clone_without_an_origin_is_its_place_on_a_shared_store(tmp_path: Path) -> None:
    repo = clone(tmp_path / "shop", None)
    assert Resolver(by_remote=True)(repo) == Resolver()(repo)
