"""The subject of an X.509 certificate (CN, O), read from PEM with a small DER walker.

The API server names a client-certificate user by the subject's CN and its groups by the O
values; cpctl needs exactly that (``--grant-rbac`` when the API cannot answer a SelfSubjectReview)
and nothing else of the certificate, so no crypto library: the bytes come from a kubeconfig on a
master and are untrusted - every length is checked, anything malformed is ``None``.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Dict, List, Optional, Tuple

OIDS = {bytes([0x55, 0x04, 0x03]): "CN", bytes([0x55, 0x04, 0x0A]): "O"}
STRING_TAGS = (0x0C, 0x13, 0x14, 0x16, 0x1E)       # UTF8String, PrintableString, T61, IA5, BMPString
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s*(.+?)\s*-----END CERTIFICATE-----", re.S)


class _Bad(Exception):
    pass


def _tlv(data: bytes, at: int) -> Tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at ``at``."""
    if at + 2 > len(data):
        raise _Bad()
    tag, first = data[at], data[at + 1]
    at += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise _Bad()
        length = int.from_bytes(data[at:at + count], "big")
        at += count
    if at + length > len(data):
        raise _Bad()
    return tag, at, at + length


def _children(data: bytes, start: int, end: int) -> List[Tuple[int, int, int]]:
    out = []
    while start < end:
        tag, value, stop = _tlv(data, start)
        if stop > end:
            raise _Bad()
        out.append((tag, value, stop))
        start = stop
    return out


def _text(tag: int, raw: bytes) -> str:
    return raw.decode("utf-16-be" if tag == 0x1E else "utf-8", "replace")


def subject(pem: bytes) -> Optional[Dict[str, List[str]]]:
    """{"CN": [...], "O": [...]} of the first certificate in ``pem``; None when there is none."""
    match = _PEM.search(pem)
    if match is None:
        return None
    try:
        der = base64.b64decode(b"".join(match.group(1).split()), validate=True)
        tag, start, end = _tlv(der, 0)
        _tag, tbs_start, tbs_end = _children(der, start, end)[0]
        fields = _children(der, tbs_start, tbs_end)
        if fields and fields[0][0] == 0xA0:                 # [0] version
            fields = fields[1:]
        name_tag, name_start, name_end = fields[4]         # serial, signature, issuer, validity, subject
        if tag != 0x30 or name_tag != 0x30:
            return None
        found: Dict[str, List[str]] = {}
        for _set, set_start, set_end in _children(der, name_start, name_end):
            for _seq, seq_start, seq_end in _children(der, set_start, set_end):
                (oid_tag, oid_start, oid_end), (value_tag, value_start, value_end) = \
                    _children(der, seq_start, seq_end)[:2]
                key = OIDS.get(der[oid_start:oid_end]) if oid_tag == 0x06 else None
                if key and value_tag in STRING_TAGS:
                    found.setdefault(key, []).append(_text(value_tag, der[value_start:value_end]))
        return found
    except (_Bad, IndexError, ValueError, binascii.Error):
        return None
