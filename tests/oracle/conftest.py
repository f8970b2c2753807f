"""tests/oracle: the real vLLM 0.33 scheduler as an oracle (needs `scripts/install_oracle.sh`).

Every test here is marked `oracle`. The whole folder is skipped, with the import error as the
reason, when `import vllm` fails — unless FRONTIER_REQUIRE_ORACLE=1 (set by `make test`, so CI
can never pass without the oracle), which turns that into an error; `vllm` is imported only when a test of this folder is selected.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HERE = Path(__file__).parent

# vLLM logs at INFO on import and per scheduler; keep test output readable.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def _vllm_import_error() -> str | None:
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 — any import failure means no oracle
        return f"{type(exc).__name__}: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if _HERE in Path(str(item.fspath)).parents]
    if not ours:
        return
    error = _vllm_import_error()
    skip = None
    if error is not None and os.environ.get("FRONTIER_REQUIRE_ORACLE", "") not in ("", "0"):
        raise pytest.UsageError(f"FRONTIER_REQUIRE_ORACLE is set but vLLM cannot be imported: {error}")
    if error is not None:
        skip = pytest.mark.skip(
            reason=f"vLLM oracle unavailable ({error}); run scripts/install_oracle.sh to enable"
        )
    for item in ours:
        item.add_marker(pytest.mark.oracle)
        # importing vLLM on torch 2.13 warns about torch.jit; not ours to fix.
        item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning"))
        if skip is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_driver():
    """The `vllm_driver` module (imported lazily so collection never needs vllm)."""
    import vllm_driver as module

    return module
