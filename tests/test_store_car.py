"""CARv1 export/import: round trip, DAG walking, an independent reader agrees, corruption is refused."""

from __future__ import annotations

import io
from pathlib import Path

import ipld_car
import pytest
from ipfs_double import serve_ipfs
from multiformats import CID as RefCID

from thoughtloom.store.blocks import CorruptBlock, encode, link, raw
from thoughtloom.store.car import export_car, import_car, read_car
from thoughtloom.store.ipfs import IPFSStore
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.store.store import get_obj, put_obj


def _run_dag(store: SQLiteStore) -> tuple[str, set[str]]:
    """Two graph versions: head2 -> head1, nodes with parent links and a raw content block."""
    content = raw(b"a long answer " * 1000)
    store.put(*content)
    root = put_obj(store, {"id": "root", "parents": []})
    a = put_obj(store, {"id": "a", "parents": [link(root)], "content": link(content[0])})
    b = put_obj(store, {"id": "b", "parents": [link(root), link(a)]})
    head1 = put_obj(store, {"nodes": [link(root), link(a)], "prev": None})
    head2 = put_obj(store, {"nodes": [link(root), link(a), link(b)], "prev": link(head1)})
    put_obj(store, {"unrelated": True})
    return head2, {content[0], root, a, b, head1, head2}


def test_export_walks_the_dag_and_round_trips(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as src, SQLiteStore(tmp_path / "b.db") as dst:
        head, reachable = _run_dag(src)
        n = export_car(src, [head], tmp_path / "run.car")
        assert n == len(reachable)  # each block once; the unrelated block is not exported
        assert import_car(dst, tmp_path / "run.car") == [head]
        assert sorted(dst.cids()) == sorted(reachable)
        assert get_obj(dst, head) == get_obj(src, head)


def test_output_parses_with_an_independent_reader(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as src:
        head, reachable = _run_dag(src)
        out = io.BytesIO()
        export_car(src, [head], out)
        roots, blocks = ipld_car.decode(out.getvalue())  # pure-Python multiformats + dag-cbor
        assert [str(r.set(base="base32")) for r in roots] == [head]
        assert {str(c.set(base="base32")) for c, _ in blocks} == reachable
        for cid, data in blocks:
            assert cid.hashfun.digest(bytes(data)) == cid.digest  # multihash (code, size, digest)
            assert bytes(data) == src.get(str(cid))
        assert str(blocks[0][0].set(base="base32")) == head  # depth-first from the root, like `ipfs dag export`


def test_reads_a_car_written_by_the_independent_writer(tmp_path: Path) -> None:
    cid, data = encode({"hello": "world"})
    car = bytes(ipld_car.encode([RefCID.decode(cid)], [(RefCID.decode(cid), data)]))
    with SQLiteStore(tmp_path / "s.db") as s:
        assert import_car(s, car) == [cid]
        assert get_obj(s, cid) == {"hello": "world"}


def test_explicit_block_list(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as s:
        head, _ = _run_dag(s)
        out = io.BytesIO()
        assert export_car(s, [head], out, blocks=[head]) == 1
        roots, blocks = read_car(out.getvalue())
        assert roots == [head] and [c for c, _ in blocks] == [head]


def test_a_corrupt_block_fails_the_import_and_stores_nothing(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as src, SQLiteStore(tmp_path / "b.db") as dst:
        head, _ = _run_dag(src)
        out = io.BytesIO()
        export_car(src, [head], out)
        damaged = bytearray(out.getvalue())
        damaged[-1] ^= 0xFF
        with pytest.raises(CorruptBlock, match="CAR block does not match its CID"):
            import_car(dst, bytes(damaged))
        assert len(dst) == 0


def test_not_a_car_file(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as s:
        for junk in (b"", b"\x05abc", b"\x02\xa0\x00"):
            with pytest.raises(ValueError):
                import_car(s, junk)


def test_moves_between_sqlite_and_an_ipfs_node(tmp_path: Path) -> None:
    with serve_ipfs() as double, SQLiteStore(tmp_path / "s.db") as s, \
            IPFSStore(double.url, refs_path=tmp_path / "refs.db") as node:
        head, reachable = _run_dag(s)
        out = io.BytesIO()
        export_car(s, [head], out)
        assert node.import_dag(out.getvalue()) == [head]  # `ipfs dag import`
        assert head in double.pins and all(node.has(c) for c in reachable)
        with SQLiteStore(tmp_path / "back.db") as back:
            assert import_car(back, node.export_dag(head)) == [head]  # `ipfs dag export`
            assert sorted(back.cids()) == sorted(reachable)
