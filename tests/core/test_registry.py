"""Entry-point discovery and loading, against real installed distributions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from envlayer import Environment
from envlayer.discovery.backend_registry import backend_names, list_backends, load_backend
from envlayer.errors import BackendConflict, BackendLoadError, BackendNotFound
from envlayer.testing.fixtures import run_in_new_interpreter

PluginMaker = Callable[..., Path]


def test_lists_installed_backends_with_their_distribution() -> None:
    infos = {i.name: i for i in list_backends()}
    assert infos["local"].distribution == "envlayer"
    assert infos["toy"].distribution == "envlayer-toy"
    assert infos["toy"].target == "envlayer_toy:ToyEnvironment"
    assert infos["local"].version == "0.1.0"


def test_loads_the_toy_plugin_through_its_entry_point() -> None:
    toy = load_backend("toy")
    assert issubclass(toy, Environment)
    assert toy.__module__ == "envlayer_toy"


def test_unknown_backend_lists_installed_and_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    from envlayer.discovery import backend_registry as registry

    monkeypatch.setitem(registry.KNOWN_PACKAGES, "nimbus", "envlayer-nimbus")  # published, not installed
    with pytest.raises(BackendNotFound) as info:
        load_backend("nimbus")
    message = str(info.value)
    assert "installed backends:" in message and "local" in message and "toy" in message
    assert "pip install envlayer-nimbus" in message


def test_misspelled_backend_suggests_the_installed_one() -> None:
    with pytest.raises(BackendNotFound, match="did you mean 'toy'"):
        load_backend("tyo")


def test_unknown_unpublished_backend_has_a_generic_hint() -> None:
    with pytest.raises(BackendNotFound) as info:
        load_backend("no-such-thing")
    assert info.value.package is None
    assert "install the package" in info.value.hint


def test_broken_plugin_names_the_plugin_and_chains_the_cause(make_plugin: PluginMaker) -> None:
    make_plugin(
        "envlayer-broken",
        {"broken": "envlayer_broken_mod:Env"},
        "envlayer_broken_mod",
        "import a_module_that_does_not_exist\n",
    )
    with pytest.raises(BackendLoadError) as info:
        load_backend("broken")
    assert "envlayer-broken" in str(info.value)
    assert "a_module_that_does_not_exist" in str(info.value)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_target_that_is_not_an_environment_is_refused(make_plugin: PluginMaker) -> None:
    make_plugin("envlayer-odd", {"odd": "envlayer_odd_mod:thing"}, "envlayer_odd_mod", "thing = 42\n")
    with pytest.raises(BackendLoadError, match="is not an Environment"):
        load_backend("odd")


def test_duplicate_name_from_two_distributions_names_both(make_plugin: PluginMaker) -> None:
    make_plugin("envlayer-dup-one", {"dup": "envlayer_dup_a:Env"})
    make_plugin("envlayer-dup-two", {"dup": "envlayer_dup_b:Env"})
    with pytest.raises(BackendConflict) as info:
        load_backend("dup")
    assert info.value.distributions == ["envlayer-dup-one", "envlayer-dup-two"]


def test_a_plugin_registering_local_is_ignored(make_plugin: PluginMaker) -> None:
    from envlayer.discovery.backend_registry import shadows_builtin
    from envlayer.local.backend import LocalEnvironment

    make_plugin("envlayer-impostor", {"local": "envlayer_impostor:Env"})
    assert load_backend("local") is LocalEnvironment
    impostor = next(i for i in list_backends() if i.distribution == "envlayer-impostor")
    assert shadows_builtin(impostor)


def test_discovery_is_fresh_after_an_install(make_plugin: PluginMaker) -> None:
    assert "late" not in backend_names()
    make_plugin(
        "envlayer-late",
        {"late": "envlayer_late_mod:LateEnv"},
        "envlayer_late_mod",
        "from envlayer_toy import ToyEnvironment as LateEnv\n",
    )
    assert "late" in backend_names()
    assert load_backend("late").__name__ == "ToyEnvironment"


def test_listing_imports_no_backend_module_and_no_sdk() -> None:
    code = (
        "import sys, envlayer\n"
        "from envlayer.discovery.backend_registry import list_backends\n"
        "names = [b.name for b in list_backends()]\n"
        "assert 'toy' in names and 'docker' in names, names\n"
        "heavy = ['docker', 'paramiko', 'modal', 'daytona', 'requests', 'stevedore',\n"
        "         'envlayer_docker', 'envlayer_ssh', 'envlayer_modal', 'envlayer_toy', 'envlayer.testing', 'pytest']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    assert run_in_new_interpreter(code).strip() == ""


def test_fast_reader_agrees_with_importlib_metadata() -> None:
    import importlib.metadata

    from envlayer.discovery.entrypoints import read_group

    fast = sorted((r.name, r.value, r.distribution, r.version) for r in read_group("envlayer.backends"))
    slow = sorted(
        (ep.name, ep.value, ep.dist.name, ep.dist.version)  # type: ignore[union-attr]
        for ep in importlib.metadata.entry_points(group="envlayer.backends")
    )
    assert fast == slow


def test_zip_on_sys_path_defers_to_importlib_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    from envlayer.discovery.entrypoints import read_group

    archive = tmp_path / "zipped.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(
            "envlayer_zipped-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: envlayer-zipped\nVersion: 1.0\n"
        )
        zf.writestr("envlayer_zipped-1.0.dist-info/entry_points.txt", "[envlayer.backends]\nzipped = zipped_mod:Env\n")
    monkeypatch.syspath_prepend(str(archive))
    records = {r.name: r for r in read_group("envlayer.backends")}
    assert records["zipped"].distribution == "envlayer-zipped"
    assert "toy" in records
