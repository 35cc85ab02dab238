"""Offline mode: deterministic rule-based planner, executor and verifier (no model needed)."""

from models.offline.base import OFFLINE_LABEL, OfflineModel
from models.offline.executor import OfflineExecutor
from models.offline.planner import OfflinePlanner
from models.offline.verifier import OfflineVerifier

__all__ = ["OFFLINE_LABEL", "OfflineExecutor", "OfflineModel", "OfflinePlanner", "OfflineVerifier"]
