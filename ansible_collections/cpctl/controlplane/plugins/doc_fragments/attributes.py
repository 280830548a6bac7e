# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The support levels every module of the collection shares, written once: each runs on the
controller as an action plugin (cpctl reaches the master over SSH or locally), on POSIX hosts,
neither async nor bypassing the host loop. Every module extends this fragment after
``ansible.builtin.action_common_attributes`` and its ``.flow`` (which describe the attributes);
check_mode and diff_mode differ per module and stay in each module (or in a fragment shared by the
modules whose support is the same); a module whose support differs for one of these attributes
sets just that key in its own ``attributes`` (its own value wins over a fragment's)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  platform:
    platforms: posix
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
"""
