"""IPFSStore specifics against the RPC double: it trusts no CID or block the node returns."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from ipfs_double import IPFSDouble, serve_ipfs

from thoughtloom.store.blocks import CorruptBlock, cid_of, encode
from thoughtloom.store.ipfs import IPFSError, IPFSStore
from thoughtloom.store.store import StoreError, put_obj


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[IPFSDouble, IPFSStore]]:
    with serve_ipfs() as double, IPFSStore(double.url + "/api/v0", refs_path=tmp_path / "refs.db") as s:
        yield double, s


def test_a_node_that_answers_with_another_cid_is_caught(node: tuple[IPFSDouble, IPFSStore]) -> None:
    double, s = node
    double.lie_on_put = True
    cid, data = encode({"x": 1})
    with pytest.raises(CorruptBlock, match=f"corrupt block {cid}: IPFS node at .* stored it as b"):
        s.put(cid, data)


def test_a_node_that_ignores_cid_codec_gets_the_older_format_parameter_and_keeps_our_cids(
    node: tuple[IPFSDouble, IPFSStore],
) -> None:
    double, s = node
    double.ignore_cid_codec = True  # as js-ipfs does
    first = put_obj(s, {"x": 1})
    second = put_obj(s, {"x": 2})
    assert first.startswith("bafyrei") and s.get(first) == double.blocks[first]
    assert double.blocks[second] and s.has(second)
    puts = [c for c in double.calls if c.startswith("block/put")]
    assert len(puts) == 3  # the first block twice (cid-codec ignored, then format=), the second once


def test_blocks_are_put_with_the_right_codec_and_refs_pin(node: tuple[IPFSDouble, IPFSStore]) -> None:
    double, s = node
    cid = put_obj(s, {"x": 1})
    assert double.blocks[cid] and cid.startswith("bafyrei")  # dag-cbor, sha2-256
    s.set_ref("run/1/head", cid)
    assert cid in double.pins  # the head (and so everything it links to) survives the node's GC


def test_node_errors_are_one_line(node: tuple[IPFSDouble, IPFSStore]) -> None:
    _, s = node
    with pytest.raises(IPFSError, match=r"IPFS pin/add failed \(500\): block was not found locally"):
        s.pin(cid_of(b"absent"))


def test_unreachable_node_is_a_store_error(tmp_path: Path) -> None:
    with IPFSStore("http://127.0.0.1:9", refs_path=tmp_path / "r.db", timeout_s=2) as s, \
            pytest.raises(StoreError, match=r"^cannot reach IPFS node at http://127.0.0.1:9: "):
        s.get(cid_of(b"x"))


def test_the_double_is_post_only_like_kubo(node: tuple[IPFSDouble, IPFSStore]) -> None:
    double, _ = node
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{double.url}/api/v0/block/stat?arg={cid_of(b'x')}")
    assert info.value.code == 405
    request = urllib.request.Request(f"{double.url}/api/v0/block/stat?arg={cid_of(b'x')}", data=b"", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request)
    assert info.value.code == 500 and json.loads(info.value.read())["Type"] == "error"
