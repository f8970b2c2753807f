"""Trace replay: JSONL / CSV / Parquet parsing and one-line errors naming the row."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from simulator.workload import WorkloadSpec, generate_requests


def _gen(path, n=1000):
    return generate_requests(WorkloadSpec(dataset_name="trace", dataset_path=str(path), num_prompts=n))


def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_sorted_by_arrival_with_ids_and_priority(tmp_path):
    p = _jsonl(
        tmp_path / "t.jsonl",
        [
            {"request_id": "a", "arrival_time_s": 0.5, "prompt_len": 10, "output_len": 3},
            {"request_id": "b", "arrival_time_s": 0.25, "prompt_token_ids": [1, 2, 3], "output_len": 2, "priority": -1},
        ],
    )
    reqs = _gen(p)
    assert [(r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.priority, r.prompt_token_ids) for r in reqs] == [
        ("b", 0.25, 3, 2, -1, (1, 2, 3)),
        ("a", 0.5, 10, 3, 0, None),
    ]


def test_num_prompts_takes_first_rows_in_file_order(tmp_path):
    p = _jsonl(tmp_path / "t.jsonl", [{"arrival_time_s": 3 - i, "prompt_len": 5, "output_len": 1} for i in range(3)])
    assert [(r.request_id, r.arrival_s) for r in _gen(p, n=2)] == [("1", 2.0), ("0", 3.0)]


def test_csv_with_token_id_strings(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("request_id,arrival_time_s,prompt_len,prompt_token_ids,output_len\nx,0,,\"[4, 5]\",7\ny,1.5,6,,8\nz,2,,9 8 7,1\n")
    reqs = _gen(p)
    assert [(r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.prompt_token_ids) for r in reqs] == [
        ("x", 0.0, 2, 7, (4, 5)),
        ("y", 1.5, 6, 8, None),
        ("z", 2.0, 3, 1, (9, 8, 7)),
    ]


def test_parquet(tmp_path):
    p = tmp_path / "t.parquet"
    table = pa.table({"request_id": ["r0", "r1"], "arrival_time_s": [0.0, 1.0], "prompt_len": [4, 8], "output_len": [2, 3]})
    pq.write_table(table, p)
    assert [(r.request_id, r.prompt_len, r.output_len) for r in _gen(p)] == [("r0", 4, 2), ("r1", 8, 3)]


@pytest.mark.parametrize(
    "row,message",
    [
        ({"arrival_time_s": 0.0, "output_len": 3}, "trace row 1: missing column\\(s\\) prompt_len\\|prompt_token_ids"),
        ({"prompt_len": 4, "output_len": 3}, "trace row 1: missing column\\(s\\) arrival_time_s"),
        ({"arrival_time_s": -1, "prompt_len": 4, "output_len": 3}, "trace row 1: arrival_time_s=-1.0 is invalid"),
        ({"arrival_time_s": "soon", "prompt_len": 4, "output_len": 3}, "trace row 1: arrival_time_s='soon' is not a number"),
        ({"arrival_time_s": 0, "prompt_len": 4.5, "output_len": 3}, "trace row 1: prompt_len=4.5 is invalid"),
        ({"arrival_time_s": 0, "prompt_len": 4, "output_len": 0}, "trace row 1: output_len=0 is invalid"),
        ({"arrival_time_s": 0, "prompt_len": 3, "prompt_token_ids": [1, 2], "output_len": 1}, "trace row 1: prompt_len=3 but prompt_token_ids has 2"),
        ({"arrival_time_s": 0, "prompt_token_ids": [1, -2], "output_len": 1}, "trace row 1: prompt_token_ids holds"),
        ({"request_id": "0", "arrival_time_s": 0, "prompt_len": 4, "output_len": 1}, "trace row 1: request_id='0' repeats row 0"),
    ],
)
def test_bad_rows_name_the_row(tmp_path, row, message):
    good = {"request_id": "0", "arrival_time_s": 0.0, "prompt_len": 4, "output_len": 1}
    p = _jsonl(tmp_path / "t.jsonl", [good, row])
    with pytest.raises(ValueError, match=message):
        _gen(p)


def test_bad_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        _gen(tmp_path / "missing.jsonl")
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(ValueError, match="suffix '.txt'; valid: .jsonl, .json, .csv, .parquet"):
        _gen(tmp_path / "t.txt")
    (tmp_path / "t.jsonl").write_text('{"arrival_time_s": 0\n')
    with pytest.raises(ValueError, match="line 1 is not valid JSON"):
        _gen(tmp_path / "t.jsonl")
    # a .json file holding one array of rows is read as such; a row that is not an object is named
    # (a JSON array read as JSON Lines ended in "AttributeError: 'list' object has no attribute 'get'")
    (tmp_path / "a.json").write_text(json.dumps([{"arrival_time_s": 0.5, "prompt_len": 4, "output_len": 2},
                                                 {"arrival_time_s": 0.0, "prompt_len": 3, "output_len": 1}]))
    assert [(r.arrival_s, r.prompt_len) for r in _gen(tmp_path / "a.json")] == [(0.0, 3), (0.5, 4)]
    (tmp_path / "ints.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"^trace row 0: a JSON int, not an object with arrival_time_s, output_len "
                                         r"and prompt_len or prompt_token_ids$"):
        _gen(tmp_path / "ints.json")
    (tmp_path / "cut.json").write_text('[{"arrival_time_s": 0,')
    with pytest.raises(ValueError, match=r"cut.json: not a valid JSON array \(Expecting property name"):
        _gen(tmp_path / "cut.json")
    # a CSV row with more fields than the header was read with the extra ones dropped
    (tmp_path / "extra.csv").write_text("arrival_time_s,prompt_len,output_len\n0,10,5\n0.1,20,5,99\n")
    with pytest.raises(ValueError, match=r"^trace row 1: 4 fields, the header has 3 \(quote a field that holds a "
                                         r"comma\)$"):
        _gen(tmp_path / "extra.csv")
    for name in ("b.jsonl", "b.csv"):          # a binary file: the bare utf-8 codec message before
        (tmp_path / name).write_bytes(b"arrival_time_s\n\xcb\x00")
        with pytest.raises(ValueError, match=rf"^trace file '{tmp_path / name}' is not a UTF-8 text file \(byte 15\)$"):
            _gen(tmp_path / name)
