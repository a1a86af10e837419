"""The public names of the science packages (ARCHITECTURE.md: curated ``__init__`` files).

Each package ``__init__`` re-exports its modules' ``__all__``: one list per module says
what is public, and the package's list must stay in step with them.  The names earlier
issues made part of the contract import from where they always did.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

# names a module lists as public that its package deliberately leaves to the module
NOT_REEXPORTED = {"covbook.icl": {"adam_on_tasks"}}  # prior_work's helper, imported from covbook.icl.training

CONTRACT = {
    "covbook.attention": ["softmax_attention", "readout_path"],
    "covbook.theory": ["covariance_readout"],
    "covbook.processes": ["GaussianIID", "VAR1"],
    "covbook.icl": ["make_regression_tasks", "construct_gd_head", "population_gd", "empirical_gd", "ols"],
    "covbook.markov": ["find_cycle", "seq_rep_n", "distinct_n"],
}


@pytest.mark.parametrize("package", ["covbook.icl", "covbook.markov", "covbook.transformer"])
def test_a_package_reexports_exactly_its_modules_public_names(package: str) -> None:
    pkg = importlib.import_module(package)
    defined: dict[str, object] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for name in getattr(module, "__all__", []):
            defined[name] = getattr(module, name)
    assert len(pkg.__all__) == len(set(pkg.__all__)), "a name is listed twice"
    assert set(pkg.__all__) == set(defined) - NOT_REEXPORTED.get(package, set())
    for name in pkg.__all__:
        assert getattr(pkg, name) is defined[name], name


@pytest.mark.parametrize("module, names", CONTRACT.items())
def test_the_contract_names_import_from_where_they_did(module: str, names: list[str]) -> None:
    mod = importlib.import_module(module)
    for name in names:
        assert name in mod.__all__ and callable(getattr(mod, name)), f"{module}.{name}"
