"""Resource quantities without ``decimal`` for the forms kubeadm writes (issue 38: ~1 ms of every
status): validity and sign from the text, ``decimal`` only for an exponent or a comparison."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cpctl.core import podspec

VALUES = ["250m", "1Gi", "2", "0", "-0", "-0.000", "-.5", "+5", "-1", "1.5k", "0.1n", "-0.0001u", ".5", "5.",
          "1e3", "-1e3", "1E-3", "-0e5", "1e" + "9" * 40, "-1e" + "9" * 40, "1e999999", "1e1000000", "12Ei",
          "a lot", "", " 250m ", "1.2.3", "--1", "1ee3", "1Gi3", "1" * 64, "1" * 65, 1, -1, 0.5, -0.5, 1e300, True]


@pytest.mark.parametrize("value", VALUES)
def test_validity_and_sign_agree_with_decimal(value: object) -> None:
    amount = podspec.parse_quantity(value)  # type: ignore[arg-type]
    assert podspec.is_quantity(value) == (amount is not None)  # type: ignore[arg-type]
    assert podspec._negative(value) == (amount is not None and amount < 0)  # type: ignore[arg-type]


def test_limits_are_compared_and_negatives_refused() -> None:
    errors = podspec.validate_resources({"requests": {"cpu": "2", "memory": "-1Mi"},
                                         "limits": {"cpu": "1500m", "memory": "1Gi"}}, "c")
    assert any("requests[cpu]" in e and "must be less than or equal to cpu limit of 1500m" in e for e in errors)
    assert any("requests[memory]" in e and "greater than or equal to 0" in e for e in errors)
    assert podspec.validate_resources({"requests": {"cpu": "1e3m"}, "limits": {"cpu": "1"}}, "c") == []
    assert podspec.validate_resources({"requests": {"cpu": "1001m"}, "limits": {"cpu": "1"}}, "c") != []


def test_kubeadms_requests_load_no_decimal() -> None:
    code = ("import sys\nfrom cpctl.core import podspec\n"
            "assert podspec.validate_resources({'requests': {'cpu': '250m', 'memory': '100Mi'}}, 'c') == []\n"
            "print('decimal' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-1000:]
    assert out.stdout.strip() == "False"
