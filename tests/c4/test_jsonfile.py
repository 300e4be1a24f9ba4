"""``c4.jsonfile.read_json``: every way a JSON file can be bad gives the caller's error naming
the file, the line where there is one, and what the file should be."""

from __future__ import annotations

import pytest

from c4.errors import FormatError
from c4.jsonfile import read_json
from traffic_planner.errors import FlowFormatError


def test_a_good_file_is_its_document(tmp_path):
    (tmp_path / "f.json").write_text('{"flows": [1, 2]}\n')
    assert read_json(tmp_path / "f.json", "flows file") == {"flows": [1, 2]}


@pytest.mark.parametrize("content,message,line", [
    (b'{"a": 1,\n "b": }\n', "not valid JSON: Expecting value", 2),
    (b'{"a": "\xff\xfe"}', "not UTF-8 text (invalid start byte at byte 7): a plan file is a "
                           "JSON file", None),
    (b'{"a":\n' + b"[" * 100_000 + b"]" * 100_000 + b"}", "JSON nested too deeply to read (a "
                                                         "plan file nests a few levels)", 2),
])
def test_a_bad_file_names_itself_its_line_and_what_it_should_be(tmp_path, content, message,
                                                                  line):
    path = tmp_path / "p.json"
    path.write_bytes(content)
    with pytest.raises(FlowFormatError) as err:
        read_json(path, "plan file", FlowFormatError)
    assert message in str(err.value) and str(path) in str(err.value)
    assert err.value.line == line


def test_an_unreadable_file_is_the_default_format_error(tmp_path):
    with pytest.raises(FormatError, match=r"cannot read topology file: .*No such file"):
        read_json(tmp_path / "missing.json", "topology file")
