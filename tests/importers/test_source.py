"""Reading trace files: plain, .gz and one-file .zip give the same records; binary and
two-file archives are one error naming the file."""

import gzip
import zipfile

import pytest

from soak.importers.source import ImportFailed, describe, records

TEXT = b"a,b\n1,2\r\n3,4\r5,6"


@pytest.fixture(params=["plain", "gz", "zip"])
def packed(request, tmp_path):
    path = tmp_path / "trace.txt"
    if request.param == "plain":
        path.write_bytes(TEXT)
    elif request.param == "gz":
        path = tmp_path / "trace.txt.gz"
        path.write_bytes(gzip.compress(TEXT))
    else:
        path = tmp_path / "trace.zip"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("inner.txt", TEXT)
    return path


def test_every_packing_gives_the_same_numbered_records(packed):
    got = [(r.line, r.text, r.complete) for r in records(packed)]
    assert got == [(1, "a,b", True), (2, "1,2", True), (3, "3,4", True), (4, "5,6", False)]


def test_crlf_split_across_read_chunks_is_one_break(tmp_path, monkeypatch):
    monkeypatch.setattr("soak.importers.source.CHUNK_B", 4)
    path = tmp_path / "t.csv"
    path.write_bytes(b"abc\r\ndef\r\nghi\n")
    assert [r.text for r in records(path)] == ["abc", "def", "ghi"]


def test_describe_records_size_sha256_and_zip_member(packed):
    source = describe(packed, "csv")
    assert source.size_b == packed.stat().st_size
    assert len(source.sha256) == 64
    assert source.member == ("inner.txt" if packed.suffix == ".zip" else None)


def test_binary_content_names_file_and_line(tmp_path):
    path = tmp_path / "b.csv"
    path.write_bytes(b"a,b\n1,2\n\x00\x01\x02\n")
    with pytest.raises(ImportFailed, match=r"b\.csv:3: binary data"):
        list(records(path))


def test_a_zip_with_two_files_is_refused(tmp_path):
    path = tmp_path / "two.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a.txt", "1")
        z.writestr("b.txt", "2")
    with pytest.raises(ImportFailed, match="exactly one file, this one holds 2"):
        describe(path, "csv")
