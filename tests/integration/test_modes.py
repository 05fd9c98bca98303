"""Low-overhead modes record exactly what full tracing records of the same steps and ops.

The same seeded generation is recorded in full and in each mode; both traces are queried for
which ops each thread ran in which token step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from profinfer_perfetto.query.session import TraceQuery
from tests.conftest import Cli
from tests.integration.test_record import completion

pytestmark = pytest.mark.root

OPS = "select step, op, tensor from profinfer_op"


def ops_by_step(trace: Path) -> tuple[Counter[tuple[int, str, str]], list[int]]:
    with TraceQuery(trace, "builtin") as q:
        ops = Counter((int(s), o, t) for s, o, t in q.sql(OPS).rows)
        steps = [int(r[0]) for r in q.sql("select step from profinfer_step order by step").rows]
    return ops, steps


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[Counter[tuple[int, str, str]], list[int]]:  # noqa: E501
    from scripts import assets
    from tests.conftest import run_cli

    out = tmp_path_factory.mktemp("full") / "full.pftrace"
    cmd = completion(lambda tool, build="shared": assets.llama_bin(tool, build),
                     assets.model("tiny-llama"), 2, n=16)
    result = run_cli("record", "-o", out, "--", *cmd)
    assert result.returncode == 0, result.stderr
    return ops_by_step(out)


@pytest.mark.parametrize(
    ("options", "steps", "keep"),
    [
        (["--tokens", "3:7"], {3, 4, 5, 6}, None),
        (["--sample", "4"], {0, 4, 8, 12}, None),
        (["--tokens", "2:", "--sample", "5"], {2, 7, 12}, None),
        (["--ops", "MUL_MAT,ffn_*"], set(range(16)),
         lambda op, tensor: op == "MUL_MAT" or tensor.startswith("ffn_")),
    ],
)
def test_a_mode_records_what_full_tracing_records(
    cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path], tmp_path: Path,
    full: tuple[Counter[tuple[int, str, str]], list[int]], options: list[str], steps: set[int],
    keep: Callable[[str, str], bool] | None,
) -> None:
    out = tmp_path / "mode.pftrace"
    result = cli("record", "-o", out, *options, "--",
                 *completion(llama, model("tiny-llama"), 2, n=16))
    assert result.returncode == 0, result.stderr
    ops, token_steps = ops_by_step(out)
    full_ops, full_steps = full
    assert token_steps == full_steps == list(range(16))  # every step is still timed
    expected = Counter({k: n for k, n in full_ops.items()
                        if k[0] in steps and (keep is None or keep(k[1], k[2]))})
    assert ops == expected
    assert "lost 0 events" in result.stdout
