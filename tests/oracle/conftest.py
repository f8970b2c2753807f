"""tests/oracle: the real vLLM 0.33 and SGLang 0.5.23 schedulers as oracles (needs
`scripts/install_oracle.sh`).

Every test here is marked `oracle`. Two groups, each skipped on its own, with the import
error as the reason:
- the SGLang tests (those using the `sglang_driver` fixture, or in a `test_sglang*.py` file)
  when `sglang_driver` (and so `sglang`) cannot be imported;
- all other tests when `import vllm` fails.
With FRONTIER_REQUIRE_ORACLE=1 (set by `make test`, so CI can never pass without the
oracles) a failed import of a group with selected tests is an error instead. A group's
package is imported only when a test of that group is selected.
"""

from __future__ import annotations

import os
import warnings
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


def _sglang_import_error() -> str | None:
    try:
        with warnings.catch_warnings():
            # importing sglang on a CPU warns about Triton/AWQ/GGUF; not ours to fix.
            warnings.simplefilter("ignore")
            import sglang_driver  # noqa: F401
    except Exception as exc:  # noqa: BLE001 — any import failure means no oracle
        return f"{type(exc).__name__}: {exc}"
    return None


def _is_sglang_test(item: pytest.Item) -> bool:
    return "sglang_driver" in getattr(item, "fixturenames", ()) or Path(
        str(item.fspath)
    ).name.startswith("test_sglang")


def _require_oracle() -> bool:
    return os.environ.get("FRONTIER_REQUIRE_ORACLE", "") not in ("", "0")


def _mark_group(items: list[pytest.Item], name: str, import_error) -> None:
    if not items:
        return
    error = import_error()
    if error is not None and _require_oracle():
        raise pytest.UsageError(f"FRONTIER_REQUIRE_ORACLE is set but {name} cannot be imported: {error}")
    skip = None
    if error is not None:
        skip = pytest.mark.skip(
            reason=f"{name} oracle unavailable ({error}); run scripts/install_oracle.sh to enable"
        )
    for item in items:
        item.add_marker(pytest.mark.oracle)
        # importing vLLM on torch 2.13 warns about torch.jit; not ours to fix.
        item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning"))
        if skip is not None:
            item.add_marker(skip)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if _HERE in Path(str(item.fspath)).parents]
    sglang_items = [item for item in ours if _is_sglang_test(item)]
    vllm_items = [item for item in ours if not _is_sglang_test(item)]
    _mark_group(vllm_items, "vLLM", _vllm_import_error)
    _mark_group(sglang_items, "SGLang", _sglang_import_error)


@pytest.fixture(scope="session")
def vllm_driver():
    """The `vllm_driver` module (imported lazily so collection never needs vllm)."""
    import vllm_driver as module

    return module


@pytest.fixture(scope="session")
def sglang_driver():
    """The `sglang_driver` module (imported lazily so collection never needs sglang)."""
    import sglang_driver as module

    return module
