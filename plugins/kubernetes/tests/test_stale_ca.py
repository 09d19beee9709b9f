"""A kubeconfig whose CA is not the one that signed the API server's certificate (a
cluster re-created, a kubeconfig for another cluster) is said as that, with what to do:
not "cannot reach the Kubernetes API ... check that the cluster is up". The fake API
server serves HTTPS here with a certificate of one CA; the kubeconfig trusts another."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlayer.errors import BackendUnavailable
from envlayer.testing.fixtures import import_by_path, require_docker

fake_control = import_by_path(Path(__file__).with_name("fake_control.py"), "envlayer_k8s_fake_control")


def _write_ca(directory: Path, name: str) -> tuple[Path, object, object]:
    """A self-signed CA: its certificate file, certificate and key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def _write_server_cert(directory: Path, ca_cert: object, ca_key: object) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by the CA, and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject)  # type: ignore[attr-defined]
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    cert_path, key_path = directory / "server.crt", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def tls_fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two HTTPS fakes with one server certificate (signed by CA 'cluster'): the first's
    kubeconfig trusts that CA, the second's another CA ('stale')."""
    require_docker(fake_control.IMAGE, "the Kubernetes fake tests")
    directory = tmp_path_factory.mktemp("tls")
    ca_path, ca_cert, ca_key = _write_ca(directory, "cluster")
    stale_path, _, _ = _write_ca(directory, "stale")
    cert, key = _write_server_cert(directory, ca_cert, ca_key)
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
