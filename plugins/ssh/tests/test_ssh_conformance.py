"""The public conformance suite, run against a real sshd in both execution modes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from envlayer_ssh.backend import SSHEnvironment
from envlayer_ssh.options import SSHOptions
from ssh_testserver import SSHServer

from envlayer.testing import EnvironmentConformance, ExecContractConformance

pytestmark = pytest.mark.ssh


class TestSSHSessionConformance(EnvironmentConformance, ExecContractConformance):
    @pytest.fixture
    def env(self, sshd: SSHServer) -> Iterator[SSHEnvironment]:
        environment = SSHEnvironment(SSHOptions(**sshd.options(exec_mode="session")))
        try:
            yield environment
        finally:
            environment.cleanup()


class TestSSHOneshotConformance(EnvironmentConformance, ExecContractConformance):
    @pytest.fixture
    def env(self, sshd: SSHServer) -> Iterator[SSHEnvironment]:
        environment = SSHEnvironment(SSHOptions(**sshd.options(exec_mode="oneshot")))
        try:
            yield environment
        finally:
            environment.cleanup()
