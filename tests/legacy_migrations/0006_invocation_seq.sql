-- A diagnosis's invocations by their number: the ledger numbers a new row from MAX(seq) and
-- lists rows in seq order through this index, so recording stays cheap however many rows a
-- diagnosis has (COUNT(*) over them grew with every call).
CREATE UNIQUE INDEX IF NOT EXISTS tool_invocation_seq ON tool_invocation (diagnosis_id, seq);
