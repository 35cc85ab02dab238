"""A diagnosis's invocations by their number.

The ledger numbers a new row from ``MAX(seq)`` and lists rows in ``seq`` order through this
index, so recording stays cheap however many rows a diagnosis has (``COUNT(*)`` over them grew
with every call).
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    """Create the unique index ``tool_invocation_seq``."""
    op.create_index("tool_invocation_seq", "tool_invocation", ["diagnosis_id", "seq"], unique=True)
