"""Offline mode: deterministic rule-based planner, executor and verifier (no model needed)."""

from nodes.offline.base import OFFLINE_LABEL, OfflineModel
from nodes.offline.executor import OfflineExecutor
from nodes.offline.planner import OfflinePlanner
from nodes.offline.verifier import OfflineVerifier

__all__ = ["OFFLINE_LABEL", "OfflineExecutor", "OfflineModel", "OfflinePlanner", "OfflineVerifier"]
