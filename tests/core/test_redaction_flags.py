"""Issue 49: the one redaction rule (``cpctl.redaction``) against real flags that carry a credential,
and real flags whose name looks like one but holds a path, a duration or a switch."""

from __future__ import annotations

import pytest

from cpctl.redaction import REDACTED, is_secret_name, redact

# Flags of real components (and the sidecars that run as static pods next to them) whose VALUE is a secret.
SECRET_FLAGS = (
    "initial-cluster-token",        # etcd
    "discovery-token",              # kubeadm join
    "token",                        # kubeadm join / init, kubectl
    "certificate-key",              # kubeadm init/join --upload-certs: decrypts the kubeadm-certs Secret
    "password",                     # etcdctl, kubectl
    "db-pass",                      # a database sidecar's password (the example)
    "auth-pass",                    # keepalived's VRRP password as a static pod's flag
    "admin-pw",
    "oidc-client-secret",
    "ETCD_PASSWORD",                # an env var
    "bootstrap-token",
)
# Real flags that only look like it: their value is a path, a duration, a switch or a hash.
PLAIN_FLAGS = (
    "token-auth-file",              # kube-apiserver: a path
    "service-account-key-file",     # kube-apiserver: a path
    "tls-private-key-file",         # every component: a path
    "kubelet-client-key",           # kube-apiserver: a path, but no -file suffix (not a credential word)
    "client-cert-auth",             # etcd: a switch
    "peer-client-cert-auth",        # etcd: a switch
    "bypass",
    "enable-admission-plugins",
    "token-ttl",                    # kubeadm: a duration
    "passthrough",
)


@pytest.mark.parametrize("name", SECRET_FLAGS)
def test_a_flag_that_carries_a_secret_is_redacted_in_every_form(name: str) -> None:
    assert is_secret_name(name) and is_secret_name("--" + name), name
    for text in ("--%s=s3cr3t-v4lue" % name, "cmd --%s s3cr3t-v4lue" % name, "\"--%s=s3cr3t-v4lue\"" % name):
        shown = redact(text)
        assert "s3cr3t" not in shown and REDACTED in shown, (text, shown)
    assert redact(["--%s" % name, "s3cr3t-v4lue"]) == ["--%s" % name, REDACTED]


@pytest.mark.parametrize("name", PLAIN_FLAGS)
def test_a_flag_that_only_looks_like_one_keeps_its_value(name: str) -> None:
    assert not is_secret_name(name), name
    assert redact("--%s=/etc/kubernetes/x" % name) == "--%s=/etc/kubernetes/x" % name


@pytest.mark.parametrize("name", SECRET_FLAGS + PLAIN_FLAGS + ("x.pass", "a-pass.b", "TOKEN_FILE", "pw"))
def test_the_agents_patterns_of_a_secret_are_this_rule(name: str) -> None:
    """The text patterns a node-side revert's plan carries (``secret_text_patterns``: built here, the agent
    cannot import this module) find a secret exactly where ``redact_text`` redacts one: the same names,
    in each form (``--name=v``, ``--name v``, a YAML ``- --name`` line then its value, an env entry)."""
    import re

    from cpctl.redaction import secret_text_patterns
    patterns = [re.compile(source) for source in secret_text_patterns()]
    for text in ("--%s=s3cr3t" % name, "cmd --%s s3cr3t" % name, "'--%s=a b'" % name, "- --%s\n- s3cr3t" % name,
                 "name: %s\nvalue: s3cr3t" % name, '{"name": "%s", "value": "s3cr3t"}' % name):
        found = any(p.search(text) for p in patterns)
        assert found is (redact(text) != text) is is_secret_name(name), (text, found, redact(text))
    for text in ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----", "plain words, v=4"):
        assert any(p.search(text) for p in patterns) is (redact(text) != text), text
