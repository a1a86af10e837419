"""covbook.session.setup: seeds, threads and deterministic CPU algorithms, without loading torch's compiler."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from covbook.session import _deterministic_algorithms, setup


def test_setup_makes_cpu_runs_deterministic_without_importing_the_compiler() -> None:
    code = ("import json, sys, torch; from covbook.session import setup; setup('smoke', 3, 'cpu', quiet=True); "
            "print(json.dumps([torch.are_deterministic_algorithms_enabled(), "
            "torch.is_deterministic_algorithms_warn_only_enabled(), 'torch._inductor.config' in sys.modules, "
            "torch.initial_seed()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [True, True, False, 3]


def test_deterministic_flag_follows_the_public_call_once_the_compiler_is_loaded() -> None:
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        import torch._inductor.config as inductor_config  # the public call's path

        _deterministic_algorithms(True)
        assert torch.are_deterministic_algorithms_enabled() and inductor_config.deterministic
        _deterministic_algorithms(False)
        assert not torch.are_deterministic_algorithms_enabled() and not inductor_config.deterministic
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def test_setup_refuses_an_unknown_profile() -> None:
    with pytest.raises(ValueError, match="profile must be one of"):
        setup("paper", 0, "cpu", quiet=True)
