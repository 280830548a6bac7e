# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Argument specs the modules share: each option is defined once here and documented once in
``doc_fragments/manifest_change.py`` (the collection's tests check the two agree)."""

from __future__ import annotations

COMPONENT = dict(type="str", required=True)
REASON = dict(type="str")
FORCE = dict(type="bool", default=False)
MOVE_LEADER = dict(type="bool", default=True)

#: The options of every manifest change (static_pod_manifest, static_pod_flags).
MANIFEST_CHANGE = dict(
    component=COMPONENT,
    reason=REASON,
    timeout=dict(type="float", default=120.0),
    settle=dict(type="float", default=5.0),
    rollback=dict(type="bool", default=True),
    keep_revisions=dict(type="int", default=10, no_log=False),
    force=FORCE,
    move_leader=MOVE_LEADER,
    confirm_within=dict(type="str"),
    confirm_check=dict(type="str", no_log=True),       # a shell command that may carry a token
)

#: The companion files and kubeadm bookkeeping of an apply or a flags change (not of a rollback).
COMPANIONS = dict(
    with_file=dict(type="dict", default={}),
    keep_in=dict(type="list", elements="str", default=[]),
)

#: The defragmentation thresholds (etcd_defrag, and etcd_info's defrag_plan): doc_fragments/etcd.py THRESHOLDS.
ETCD_THRESHOLDS = dict(
    min_free=dict(type="str", default="100MiB"),
    min_ratio=dict(type="float", default=0.45),
)
#: Seconds one member's defragmentation may take (etcd_defrag, etcd_alarm): doc_fragments/etcd.py DEFRAG_TIMEOUT.
DEFRAG_TIMEOUT = dict(type="float", default=600)
