"""Settings are a value: no command changes them while the run goes on (issue 20 item 6, where
``--verify`` used to set ``settings.canary`` on the run's shared object)."""

from __future__ import annotations

import dataclasses

import pytest

from cpctl.core.settings import Settings


def test_settings_cannot_be_changed_in_place() -> None:
    settings = Settings(probe="none")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.canary = True  # type: ignore[misc]


def test_a_command_s_own_value_is_a_copy() -> None:
    settings = Settings(probe="none")
    verified = settings.with_overrides(canary=True)
    assert verified.canary and not settings.canary and verified.probe == "none"
