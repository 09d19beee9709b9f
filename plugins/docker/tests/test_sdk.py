"""envlayer_docker.sdk: the Docker SDK imported without paramiko, ssh:// intact.

Each check runs in a new interpreter: this one imported the SDK (and paramiko) long ago."""

from __future__ import annotations

import json
from typing import Any

from envlayer.testing.fixtures import run_in_new_interpreter


def _child(code: str) -> dict[str, object]:
    return json.loads(run_in_new_interpreter(code).strip().splitlines()[-1])


def test_talking_to_the_local_daemon_never_imports_paramiko(docker_api: Any) -> None:
    got = _child(
        """
        import json, sys
        import envlayer_docker.client
        from envlayer_docker.options import DockerOptions
        api = envlayer_docker.client.get_client(DockerOptions(image="x"))
        print(json.dumps({"ping": api.ping(), "paramiko": "paramiko" in sys.modules}))
        """
    )
    assert got == {"ping": True, "paramiko": False}


def test_an_ssh_daemon_address_still_gets_docker_pys_own_ssh_adapter() -> None:
    got = _child(
        """
        import json, sys
        from envlayer_docker import sdk
        docker = sdk.docker
        shell_out = docker.APIClient(base_url="ssh://nobody@127.0.0.1:1", version="1.41", use_ssh_client=True)
        adapter = shell_out.get_adapter("http+docker://ssh")
        try:  # paramiko's own client connects at once: to a port where nothing listens
            docker.APIClient(base_url="ssh://nobody@127.0.0.1:1", version="1.41")
            error = None
        except Exception as exc:
            error = type(exc).__name__
        print(json.dumps({
            "adapter": type(adapter).__module__ + "." + type(adapter).__name__,
            "same": type(adapter) is sys.modules["docker.transport.sshconn"].SSHHTTPAdapter,
            "error": error,
        }))
        """
    )
    assert got["adapter"] == "docker.transport.sshconn.SSHHTTPAdapter" and got["same"] is True
    assert got["error"] == "NoValidConnectionsError", "paramiko tried to connect (not a NameError)"


def test_without_the_stand_in_the_sdk_still_loads_paramiko() -> None:
    """The check above can fail: a plain import of the SDK does load paramiko."""
    got = _child('import json, sys, docker; print(json.dumps({"paramiko": "paramiko" in sys.modules}))')
    assert got == {"paramiko": True}
