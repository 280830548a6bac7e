"""Shared fixtures: the lab simulator and real OpenSSH servers, once per session where possible."""

pytest_plugins = ["tests.labfixture", "tests.sshfixture"]
