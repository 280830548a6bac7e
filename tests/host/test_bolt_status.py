"""``agent.etcdio.bolt_status`` (issue 46): what ``etcdutl snapshot status`` counts, read from a bbolt file
that is untrusted input (it came from a master's etcd). The real thing is compared with etcdutl in
tests/ops/test_etcdsnap_real.py; here hand-made files in bbolt's layout (meta pages 0 and 1, page
headers of 16 bytes, leaf and branch elements of 16 bytes, inline buckets) hold the parser to its
bounds: a loop, a page past the end, an element outside its page, a bad meta page are refused."""

from __future__ import annotations

import errno
import struct
from pathlib import Path
from typing import List, Tuple

import pytest

from cpctl.agent import etcdio

PAGE = 4096


def fnv64a(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def meta(page_id: int, root: int, high_water: int, txid: int) -> bytes:
    body = struct.pack("<IIIIQQQQQ", 0xED0CDAED, 2, PAGE, 0, root, 0, 2, high_water, txid)
    return (struct.pack("<QHHI", page_id, 0x04, 0, 0) + body + struct.pack("<Q", fnv64a(body))).ljust(PAGE, b"\0")


def leaf(page_id: int, items: List[Tuple[int, bytes, bytes]], size: int = PAGE) -> bytes:
    """A leaf page of (flags, key, value) elements (flags 1: the value is a bucket)."""
    head = struct.pack("<QHHI", page_id, 0x02, len(items), 0)
    data = b""
    elements = b""
    for index, (flags, key, value) in enumerate(items):
        pos = 16 * (len(items) - index) + len(data)       # from this element to its key
        elements += struct.pack("<IIII", flags, pos, len(key), len(value))
        data += key + value
    page = head + elements + data
    return page.ljust(size, b"\0") if size else page


def branch(page_id: int, children: List[Tuple[bytes, int]]) -> bytes:
    head = struct.pack("<QHHI", page_id, 0x01, len(children), 0)
    elements = b"".join(struct.pack("<IIQ", 0, 0, child) for _key, child in children)
    return (head + elements).ljust(PAGE, b"\0")


def revision_key(main: int, sub: int = 0) -> bytes:
    return struct.pack(">Q", main) + b"_" + struct.pack(">Q", sub)


def inline_bucket(items: List[Tuple[int, bytes, bytes]]) -> bytes:
    return struct.pack("<QQ", 0, 0) + leaf(0, items, size=0)


def database(root_page: bytes, *more: bytes) -> bytes:
    pages = [meta(0, 3, 4 + len(more), 1), meta(1, 3, 4 + len(more), 0), leaf(2, []), root_page, *more]
    return b"".join(pages)


def write(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "db"
    path.write_bytes(data)
    return str(path)


def test_the_revision_is_the_last_key_of_bucket_key_and_every_key_counts(tmp_path: Path) -> None:
    keys = inline_bucket([(0, revision_key(n), b"v") for n in (2, 3, 7)])
    meta_bucket = inline_bucket([(0, b"consistent_index", b"\0" * 8)])
    data = database(leaf(3, [(1, b"key", keys), (1, b"meta", meta_bucket)]))
    assert etcdio.bolt_status(write(tmp_path, data)) == {"revision": 7, "keys": 4, "total_size": 4 * PAGE}


def test_a_bucket_on_its_own_pages_behind_a_branch(tmp_path: Path) -> None:
    keys = struct.pack("<QQ", 4, 0)                       # bucket "key" rooted at page 4 (a branch)
    data = database(leaf(3, [(1, b"key", keys)]), branch(4, [(b"a", 5), (b"b", 6)]),
                    leaf(5, [(0, revision_key(1), b"x")]), leaf(6, [(0, revision_key(9), b"y")]))
    assert etcdio.bolt_status(write(tmp_path, data))["revision"] == 9


def test_one_broken_meta_page_leaves_the_other(tmp_path: Path) -> None:
    """bbolt keeps two meta pages so that a torn write of one leaves the other: it is read then."""
    data = bytearray(database(leaf(3, [(1, b"key", inline_bucket([(0, revision_key(5), b"v")]))])))
    data[40] ^= 1
    assert etcdio.bolt_status(write(tmp_path, bytes(data)))["revision"] == 5


@pytest.mark.parametrize("what", ["loop", "past the end", "element outside", "bad meta", "short", "not a bucket"])
def test_a_hostile_database_is_refused(tmp_path: Path, what: str) -> None:
    if what == "loop":                                    # a branch that holds itself: read once, then refused
        data = database(leaf(3, [(1, b"key", struct.pack("<QQ", 4, 0))]), branch(4, [(b"a", 4)] * 50))
    elif what == "past the end":
        data = database(leaf(3, [(1, b"key", struct.pack("<QQ", 99, 0))]))
    elif what == "element outside":
        page = bytearray(leaf(3, [(1, b"key", inline_bucket([]))]))
        struct.pack_into("<IIII", page, 16, 1, PAGE, 3, 16)
        data = database(bytes(page))
    elif what == "bad meta":
        data = bytearray(database(leaf(3, [])))
        data[40] ^= 1                                     # both meta pages fail their checksum
        data[PAGE + 40] ^= 1
        data = bytes(data)
    elif what == "short":
        data = database(leaf(3, []))[:60]
    else:
        data = database(leaf(3, [(0, b"key", b"x")]))
    with pytest.raises(OSError) as caught:
        etcdio.bolt_status(write(tmp_path, data))
    assert caught.value.errno == errno.EPROTO and "not an etcd database" in str(caught.value)
