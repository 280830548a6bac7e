"""The one redaction rule: secret values never leave cpctl (text, ``-o json``, ``--dry-run``, history).

A value is secret when the flag or environment variable that carries it is named like a credential:
its name holds one of ``SECRET_WORDS`` (``initial-cluster-token``, ``token``, ``oidc-client-secret``,
``ETCD_PASSWORD``, ``api-key``, kubeadm's ``certificate-key``...) or one of ``SECRET_SEGMENTS`` as a
whole word (``--db-pass``, ``--auth-pass``), unless it names a file, a path or a dir (``--token-auth-file``
holds a path, not the token). Private key material (a PEM ``PRIVATE KEY`` block) is secret wherever
it appears. The value is replaced by ``<redacted>`` in every form it takes:

* ``--token=VALUE``, with the value quoted or not, and the whole item quoted (``"--token=a b"``);
* the two-item form, ``--token`` then ``VALUE`` as the next item of a list (and in the text of a
  manifest or a diff: the next ``- VALUE`` line(s));
* ``env`` entries: ``{name: ETCD_PASSWORD, value: VALUE}`` as data, and ``name:``/``value:``
  lines in text;
* cpctl's own words about a flag: ``--token set to VALUE``, ``--token already VALUE``.

``redact`` applies it to any value (strings, lists, dicts: a command's result or a history record);
``redact_text`` to a block of text. The CLI's output functions and the history writer call them:
nothing reaches the terminal, a pipe or the state dir without passing here.
"""

from __future__ import annotations

import re
from typing import List

REDACTED = "<redacted>"
SECRET_WORDS = ("token", "password", "passwd", "passphrase", "secret", "credential", "apikey", "api-key",
                "private-key", "privatekey", "auth-key", "encryption-key", "bootstrap-key", "certificate-key")
# Whole words of a name (split at ``-``) that carry a credential on their own: ``--db-pass``,
# ``--auth-pass``, ``--admin-pw`` (never a word inside another one: ``--bypass``, ``--passthrough``).
SECRET_SEGMENTS = ("pass", "pw", "pwd", "passwd")
NOT_SECRET_SUFFIXES = ("-file", "-path", "-dir", "-files", "-ttl", "-lifetime")

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
# A quote ends a value only before one of these (or the end): ``ab'cd`` is one value, so a quote
# inside a secret never leaves its tail shown (``--client-secret=ab'cdSECRET``, a shell's ``'"'"'``).
_END = r"(?=[\s,\]}):;]|$)"
# An unquoted value: up to the next blank or JSON/YAML punctuation, a quote inside it included.
_BARE = r"(?:[^\s\"',\]}]|[\"'](?![\s,\]}):;]|$))+"
# cpctl's own words after "--flag " that are not its value ("--token is followed by ...").
_PROSE = ("set to", "already", "is", "was", "added", "removed", "given", "followed", "and", "or", "in", "not")


class _Patterns:
    """The compiled forms, built once, on the first text that could hold a secret: twelve regexes
    cost about 1.5 ms to compile, which a ``cpctl status`` whose output names no credential never pays."""

    def __init__(self) -> None:
        self.pem = re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)", re.S)
        # "--name=value" inside quotes: the whole quoted item is the flag.
        self.quoted_item = re.compile(r"(?P<q>[\"'])(?P<flag>--?(?P<name>%s)=)(?P<value>.*?)(?P=q)%s" % (_NAME, _END),
                                      re.S)
        # --name=value, the value quoted or up to the next blank (or JSON/YAML punctuation).
        self.assigned = re.compile(r"(?P<flag>--?(?P<name>%s)=)(?P<value>\"(?:[^\"\\]|\\.)*\"%s|'[^']*'%s|%s)"
                                   % (_NAME, _END, _END, _BARE))
        # cpctl's own sentences about a flag's new value.
        self.said = re.compile(r"(?P<flag>--(?P<name>%s) (?:set to|already) )(?P<value>\S+)" % _NAME)
        # "--name value" on one line (a command line): the next word when it is not another option,
        # nor a word of cpctl's own sentences about a flag ("--token (did you mean").
        self.two_words = re.compile(r"(?P<flag>(?<![\w-])--(?P<name>%s)[ \t]+)(?!(?:%s)\b|<redacted>|\()"
                                    r"(?P<value>\"(?:[^\"\\]|\\.)*\"%s|'[^']*'%s|(?!-)%s)"
                                    % (_NAME, "|".join(_PROSE), _END, _END, _BARE))
        # JSON text of an env entry: "name": "X_TOKEN", "value": "..."
        self.json_env = re.compile(r"(?P<head>\"name\"\s*:\s*\"(?P<name>[^\"]*)\"\s*,\s*\"value\"\s*:\s*)"
                                   r"(?P<value>\"(?:[^\"\\]|\\.)*\")")
        # YAML lines (also as diff lines: a leading space, + or -).
        self.item_flag_alone = re.compile(r"^[ +-]?\s*-\s+([\"']?)--(?P<name>%s)\1\s*$" % _NAME)
        self.item_value = re.compile(r"^(?P<head>[ +-]?\s*-\s+)(?P<value>(?![\"']?-).+?)\s*$")
        self.mapping = re.compile(r"^[A-Za-z0-9_.-]+:(\s|$)")
        self.env_name = re.compile(r"^[ +-]?\s*(?:-\s+)?name:\s*([\"']?)(?P<name>[A-Za-z0-9_.-]+)\1\s*$")
        self.env_value = re.compile(r"^(?P<head>[ +-]?\s*value:\s*)(?P<value>.+?)\s*$")
        self.flow_env = re.compile(r"(?P<head>\bname:\s*([\"']?)(?P<name>[A-Za-z0-9_.-]+)\2\s*,\s*value:\s*)"
                                   r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^,}\]]+)")


_compiled: List[_Patterns] = []


def _patterns() -> _Patterns:
    if not _compiled:
        _compiled.append(_Patterns())
    return _compiled[0]


def _secret_name_ahead() -> str:
    """A regex that matches (empty) where a name begins that ``is_secret_name`` calls a credential's, up to
    the first character no name holds: a secret word in it or a secret segment as a whole word (``-``
    or ``_`` around it), not ending in a file's, path's or dir's suffix. Built from the words above."""
    char = r"[^\s\"'=,:;\]}){]"
    def spelt(word: str) -> str:
        return re.escape(word).replace(r"\-", "-").replace("-", "[-_]")
    words = "|".join(spelt(w) for w in SECRET_WORDS)
    segments = "|".join(spelt(w) for w in SECRET_SEGMENTS)
    suffixes = "|".join(spelt(w) for w in NOT_SECRET_SUFFIXES)
    return (r"(?i:(?!-*%s*?(?:%s)(?!%s))(?=-*%s*?(?:%s)|-*(?:%s*?[-_])?(?:%s)(?:[-_]|(?!%s))))"
            % (char, suffixes, char, char, words, char, segments, char))


def secret_text_patterns() -> List[str]:
    """The regex sources (flags inline) of the text patterns ``redact_text`` uses, each finding text that
    holds a secret: a PEM private key block, and every pattern that names a flag or variable with its
    name held to a credential's (``is_secret_name``, as ``_secret_name_ahead``). For the agent, which
    cannot import this module: a node-side revert's plan carries them (``secret_patterns``) and the agent
    shows none of the text from the cluster where one of them finds a match - one rule, made here."""
    p = _patterns()
    ahead = "(?P<name>" + _secret_name_ahead()
    named = (p.quoted_item, p.assigned, p.said, p.two_words, p.json_env, p.item_flag_alone, p.env_name, p.flow_env)
    return ["(?s)" + p.pem.pattern] + ["(?ms)" + q.pattern.replace("(?P<name>", ahead) for q in named]


def _may_hold_secret(text: str) -> bool:
    """False when no pattern can match: every redaction needs a secret word in a name (compared
    as ``is_secret_name`` does, lowercased with ``_`` as ``-``) or a PEM private key block."""
    low = text.lower()
    if "private key" in low:
        return True
    low = low.replace("_", "-")
    return any(word in low for word in SECRET_WORDS + SECRET_SEGMENTS)


def is_secret_name(name: str) -> bool:
    """A flag or environment variable name that carries a credential (see the module doc)."""
    norm = name.lower().lstrip("-").replace("_", "-")
    if norm.endswith(NOT_SECRET_SUFFIXES):
        return False
    return any(word in norm for word in SECRET_WORDS) or any(part in SECRET_SEGMENTS for part in norm.split("-"))


def _sub_value(pattern: "re.Pattern[str]", head: str, text: str) -> str:
    quoted_item = pattern is _patterns().quoted_item

    def replace(match: "re.Match[str]") -> str:
        if not is_secret_name(match.group("name")):
            return match.group(0)
        value = match.group("value")
        quote = value[0] if value[:1] in ("'", '"') and not quoted_item else ""
        out = match.group(head) + quote + REDACTED + quote
        return (match.group("q") + out + match.group("q")) if quoted_item else out
    return pattern.sub(replace, text)


def redact_text(text: str) -> str:
    """``text`` with every secret value (see the module doc) replaced by ``<redacted>``."""
    if not isinstance(text, str) or not text or not _may_hold_secret(text):
        return text
    p = _patterns()
    text = p.pem.sub("-----BEGIN PRIVATE KEY-----" + REDACTED + "-----END PRIVATE KEY-----", text)
    text = _sub_value(p.quoted_item, "flag", text)
    text = _sub_value(p.assigned, "flag", text)
    text = _sub_value(p.said, "flag", text)
    text = _sub_value(p.two_words, "flag", text)
    text = _sub_value(p.json_env, "head", text)
    text = _sub_value(p.flow_env, "head", text)
    if "\n" in text:
        text = "\n".join(_redact_lines(text.split("\n")))
    return text


def _redact_lines(lines: List[str]) -> List[str]:
    """The YAML forms that span lines: ``- --token`` then ``- VALUE``; ``name: X_TOKEN`` then
    ``value: VALUE``. The value is the next line; in a diff (``-``/``+`` lines) the old and the
    new line both follow, so a changed value's second line is the secret too."""
    p = _patterns()
    out: List[str] = []
    pending, left = "", 0               # "item" or "env": the next ``left`` value lines are secret
    for line in lines:
        pattern = p.item_value if pending == "item" else p.env_value if pending == "env" else None
        match = pattern.match(line) if pattern is not None and left > 0 else None
        if match is not None and not (pending == "item" and p.mapping.match(match.group("value"))):
            out.append(match.group("head") + REDACTED)
            left = 1 if left == 2 and line[:1] == "-" else 0       # a diff's "-" line: its "+" line follows
            continue
        pending, left = "", 0
        flag = p.item_flag_alone.match(line)
        env = p.env_name.match(line)
        if flag is not None and is_secret_name(flag.group("name")):
            pending, left = "item", 2
        elif env is not None and is_secret_name(env.group("name")):
            pending, left = "env", 2
        out.append(line)
    return out


def redact(value: object) -> object:
    """``value`` (a command's result, a history record) with every secret in it redacted: strings
    by ``redact_text``, the two-item form in lists, ``{name, value}`` entries (env, flag lists)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return _redact_list(value)
    if isinstance(value, tuple):
        return tuple(_redact_list(list(value)))
    if isinstance(value, dict):
        out = {key: redact(item) for key, item in value.items()}
        name = value.get("name")
        if isinstance(name, str) and "value" in value and value["value"] is not None and is_secret_name(name):
            out["value"] = REDACTED
        return out
    return value


def _redact_list(items: List[object]) -> List[object]:
    out = [redact(item) for item in items]
    for index, item in enumerate(items[:-1]):
        following = items[index + 1]
        if isinstance(item, str) and item.startswith("-") and "=" not in item and is_secret_name(item) \
                and isinstance(following, str) and not following.startswith("-"):
            out[index + 1] = REDACTED
    return out
