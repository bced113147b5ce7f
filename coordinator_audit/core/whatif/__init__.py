"""What-if: a group's history from its log, replayed under another configuration (`events`, `replay`)."""
