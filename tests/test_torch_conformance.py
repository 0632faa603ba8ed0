"""PyTorch's OpInfo samples of common ops through the torch importer, on both backends."""
import json

import pytest

pytest.importorskip("torch")

from legato.testing import torch_conformance as tc  # noqa: E402

COMMON = ("add", "mul", "sin", "exp", "softmax", "nn.functional.layer_norm", "matmul",
          "where", "cat", "sum")


@pytest.fixture(scope="module")
def outcomes():
    return tc.run(COMMON, max_samples=2)


def test_common_ops_pass_on_both_backends(outcomes):
    failed = [f"{o.op} {o.case} [{o.backend}]: {o.reason}" for o in outcomes
              if o.status == "failed"]
    assert not failed, "\n".join(failed)
    ran = {(o.op, o.backend) for o in outcomes if o.status == "passed"}
    assert ran >= {(op, b) for op in COMMON for b in tc.BACKENDS}


def test_every_exclusion_names_its_reason(outcomes):
    assert all(o.reason for o in outcomes if o.status == "excluded")
    assert all(not o.reason for o in outcomes if o.status == "passed")


def test_integer_and_bool_samples_are_taken(outcomes):
    dtypes = {o.case.split("#")[0] for o in outcomes if o.status == "passed"}
    assert {"float32", "int64", "int32", "bool"} <= dtypes


def test_compare_is_exact_for_integers_and_bounded_for_floats():
    import numpy as np
    ints = np.array([1, 2, 3], np.int64)
    assert tc.compare(["add"], ints, ints) is None
    assert "1 of 3" in tc.compare(["add"], ints + np.array([0, 0, 1]), ints)
    floats = np.array([1.0, np.nan, 2.0], np.float32)
    assert tc.compare(["exp"], floats, floats.copy()) is None  # NaN equals NaN
    assert tc.compare(["exp"], floats + np.float32(1e-3), floats) is not None
    assert "got float64" in tc.compare(["add"], floats.astype(np.float64), floats)


def test_an_op_the_importer_does_not_map_is_excluded_as_not_mapped():
    # polygamma has no converter (its ATen op is aten.polygamma): excluded, named
    found = tc.run(("polygamma",), backends=("cpu_ref",), dtypes=("float32",),
                   max_samples=1)
    assert found and all(o.status == "excluded" for o in found), found
    assert any("aten." in o.reason for o in found), found


def test_main_prints_totals_and_writes_json(tmp_path, capsys):
    out = tmp_path / "outcomes.json"
    code = tc.main(["--op", "neg", "--backend", "cpu_ref", "--max-samples", "1",
                    "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "ops: 1 passed, 0 failed" in printed
    assert {o["op"] for o in json.loads(out.read_text())} == {"neg"}


def test_a_view_read_past_its_values_is_excluded_not_failed():
    # as_strided on x = base[5:15] reads base's storage, which the exported program on x's
    # values cannot: excluded under that reason; the samples on whole tensors still run
    found = tc.run(("as_strided.partial_views",), backends=("cpu_ref",), dtypes=("float32",),
                   max_samples=3)
    assert not [o for o in found if o.status == "failed"], found
    assert any(o.status == "excluded" and "outside its input" in o.reason for o in found)
    assert any(o.status == "passed" for o in found)


def test_a_refusal_keeps_its_whole_reason():
    text = "aten.x (x): dropout_p=0.5 (refused: a random op (results are deterministic)) more"
    assert tc._refusal(text) == "a random op (results are deterministic)"


def test_an_out_of_scope_dtype_is_excluded_by_name():
    found = tc.run(("nn.functional.upsample_bilinear",), backends=("cpu_ref",),
                   dtypes=("uint8", "float32"), max_samples=1)
    uint8 = [o for o in found if o.case.startswith("uint8")]
    assert uint8 and all(o.status == "excluded" and "fixed-point" in o.reason for o in uint8)
    assert [o.status for o in found if o.case.startswith("float32")] == ["passed"]


def test_reduction_indices_are_checked_by_the_values_they_select():
    import numpy as np
    data = np.array([[3, 1, 3], [0, 2, 2]])
    # ties: index 0 or 2 of row 0 and 1 or 2 of row 1 select the same values
    assert np.array_equal(tc._selected(data, np.array([2, 1]), 1), [3, 2])
    assert np.array_equal(tc._selected(data, np.array([0, 2]), 1), [3, 2])
    assert np.array_equal(tc._selected(data, np.array([[2], [1]]), -1), [[3], [2]])


def test_uninitialised_results_are_compared_by_shape_and_dtype_only():
    # empty_like's values are whatever memory held: never "random op", never a value
    # mismatch; a wrong shape or dtype still fails
    import numpy as np
    found = tc.run(("empty_like", "new_empty"), backends=("cpu_ref",),
                   dtypes=("float32", "int64", "bool"), max_samples=3)
    assert found and not [o for o in found if o.status == "failed"], found
    assert not [o for o in found if "random" in o.reason], found
    assert {o.op for o in found if o.status == "passed"} == {"empty_like", "new_empty"}
    assert "empty_like" in tc.UNINITIALISED
    assert tc._type_problem(np.zeros(2, np.int64), np.ones(2, np.int64)) is None
    assert "eager int32[3]" in tc._type_problem(np.zeros(2, np.int64), np.ones(3, np.int32))


def test_training_batch_norm_samples_compare_eagers_results_only():
    # the exported program also returns the updated running statistics (input mutations):
    # the importer keeps the user's results, so the counts match eager's
    found = tc.run(("nn.functional.batch_norm",), backends=("cpu_ref",), dtypes=("float32",),
                   max_samples=4)
    assert not [o for o in found if o.status == "failed"], found
    assert any(o.status == "passed" for o in found), found


def test_shards_split_the_ops_and_merge_into_one_table(tmp_path, capsys):
    parts = [tmp_path / "1.json", tmp_path / "2.json"]
    for k, out in enumerate(parts, 1):
        tc.main(["--op", "neg", "--op", "abs", "--backend", "cpu_ref", "--dtype", "float32",
                 "--max-samples", "1", "--shard", f"{k}/2", "--json", str(out)])
    ran = [{o["op"] for o in json.loads(out.read_text())} for out in parts]
    assert sorted(map(len, ran)) == [1, 1] and ran[0] | ran[1] == {"neg", "abs"}
    capsys.readouterr()
    assert tc.main(["--merge", *map(str, parts)]) == 0
    assert "ops: 2 passed, 0 failed, 0 excluded (of 2)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        tc.main(["--shard", "3/2"])


def test_merge_takes_each_op_from_the_report_that_ran_it(tmp_path):
    def write(name, outcomes):
        path = tmp_path / name
        path.write_text(json.dumps([o.__dict__ for o in outcomes]))
        return str(path)
    a = write("a.json", [tc.Outcome("abs", "float32#0", "cpu_ref", "passed"),
                         tc.Outcome("neg", "-", "cpu_ref", "excluded", tc.NOT_RUN),
                         tc.Outcome("sin", "-", "cpu_ref", "excluded", tc.NOT_RUN)])
    b = write("b.json", [tc.Outcome("neg", "float32#0", "cpu_ref", "failed", "x"),
                         tc.Outcome("abs", "float32#0", "cpu_ref", "failed", "again")])
    got = tc.merged([a, b])
    assert [(o.op, o.status) for o in got] == [("abs", "passed"), ("sin", "excluded"),
                                               ("neg", "failed")]
