"""The client identity every backend's client cache and the session broker are keyed by:
secrets only as digests, a credential file changed in place is another identity, and
each built-in backend tells apart what selects its target or its credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlayer.sandbox.client_identity import ClientIdentity, file_digest

SECRET = "s3cr3t-token-value"


def test_a_secret_is_never_kept_in_clear() -> None:
    identity = ClientIdentity.of("https://api.example", token=SECRET)
    assert SECRET not in repr(identity) and SECRET not in identity.secret
    assert identity != ClientIdentity.of("https://api.example", token=SECRET + "x")
    assert identity == ClientIdentity.of("https://api.example", token=SECRET)
    assert len(identity.short) == 8 and identity.secret.startswith(identity.short)


def test_a_file_changed_in_place_is_another_identity(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    assert file_digest(str(path)) == "missing" and file_digest(None) == "-"
    path.write_text("current-context: a\n")
    first = file_digest(str(path))
    path.write_text("current-context: b\n")
    assert file_digest(str(path)) not in (first, "missing")


def _identities(backend: str, environs: list[dict[str, str]], cwd: str = "/") -> list[ClientIdentity]:
    from envlayer.discovery.backend_registry import load_backend

    cls = load_backend(backend)
    return [cls.client_identity(cls.Options(), environ, cwd) for environ in environs]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("backend", "base", "variable", "values"),
    [
        ("docker", {}, "DOCKER_HOST", ("unix:///a.sock", "tcp://127.0.0.1:2376")),
        ("docker", {"DOCKER_HOST": "unix:///a.sock"}, "DOCKER_TLS_VERIFY", ("", "1")),
        ("daytona", {"DAYTONA_API_KEY": SECRET}, "DAYTONA_API_URL", ("http://127.0.0.1:1/api", "http://h:2/api")),
        ("daytona", {"DAYTONA_API_URL": "http://h/api"}, "DAYTONA_API_KEY", (SECRET, SECRET + "2")),
        ("modal", {"MODAL_TOKEN_ID": "ak-1"}, "MODAL_TOKEN_SECRET", (SECRET, SECRET + "2")),
        ("modal", {"MODAL_TOKEN_SECRET": SECRET}, "MODAL_SERVER_URL", ("http://127.0.0.1:1", "http://h:2")),
        ("ssh", {"USER": "u"}, "SSH_AUTH_SOCK", ("/tmp/agent-a", "/tmp/agent-b")),
    ],
)
def test_each_backend_tells_apart_what_selects_its_target_or_credentials(
    backend: str, base: dict[str, str], variable: str, values: tuple[str, str]
) -> None:
    first, second = _identities(backend, [{**base, variable: value} for value in values])
    assert first != second
    assert all(SECRET not in repr(identity) for identity in (first, second))


def test_kubernetes_tells_apart_two_contents_of_one_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "config"
    environ = {"KUBECONFIG": str(path)}
    path.write_text("current-context: a\n")
    [first] = _identities("kubernetes", [environ])
    path.write_text("current-context: b\n")
    [second] = _identities("kubernetes", [environ])
    assert first != second and first.server == second.server == f"kubeconfig {path}"


def test_daytona_tells_apart_two_directories_dotenv_files(tmp_path: Path) -> None:
    for name, key in (("a", SECRET), ("b", SECRET + "2")):
        (tmp_path / name).mkdir()
        (tmp_path / name / ".env").write_text(f"DAYTONA_API_KEY={key}\n")
    first, second = (_identities("daytona", [{}], str(tmp_path / name))[0] for name in "ab")
    assert first != second
