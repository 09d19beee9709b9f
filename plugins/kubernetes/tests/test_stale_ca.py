"""A kubeconfig whose CA is not the one that signed the API server's certificate (a
cluster re-created, a kubeconfig for another cluster) is said as that, with what to do:
not "cannot reach the Kubernetes API ... check that the cluster is up". The fake API
server serves HTTPS here with a certificate of one CA; the kubeconfig trusts another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envlayer.errors import BackendUnavailable
from envlayer.testing.fixtures import import_by_path, require_docker

fake_control = import_by_path(Path(__file__).with_name("fake_control.py"), "envlayer_k8s_fake_control")


@pytest.fixture(scope="module")
def tls_fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two HTTPS fakes with one server certificate (signed by CA 'cluster'): the first's
    kubeconfig trusts that CA, the second's another CA ('stale')."""
    require_docker(fake_control.IMAGE, "the Kubernetes fake tests")
    directory = tmp_path_factory.mktemp("tls")
    ca_path, ca_cert, ca_key = fake_control.write_ca(directory, "cluster")
    stale_path, _, _ = fake_control.write_ca(directory, "stale")
    cert, key = fake_control.write_server_cert(directory, ca_cert, ca_key)
    good = fake_control.start_fake(str(directory), tls=(str(cert), str(key), str(ca_path)))
    try:
        stale = fake_control.start_fake(str(directory), tls=(str(cert), str(key), str(stale_path)))
        try:
            yield good.kubeconfig, stale.kubeconfig
        finally:
            stale.stop()
    finally:
        good.stop()


def test_a_kubeconfig_with_another_ca_is_said_to_be_stale(tls_fakes: tuple[str, str]) -> None:
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.options import KubernetesOptions

    good, stale = tls_fakes
    KubernetesEnvironment.check_available(KubernetesOptions(kubeconfig=good, image=fake_control.IMAGE))
    with pytest.raises(BackendUnavailable) as info:
        KubernetesEnvironment.check_available(KubernetesOptions(kubeconfig=stale, image=fake_control.IMAGE))
    assert "cannot reach" not in info.value.message
    assert "certificate is not signed by the CA the kubeconfig trusts" in info.value.message
    assert "certificate-authority" in info.value.hint and "cluster is up" not in info.value.hint
