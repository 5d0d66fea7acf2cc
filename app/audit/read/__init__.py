"""Reading the trail back, blocking: records in bulk, the ten-minute sums, outcomes with
their scores, and the labelled rows ``iabma refit`` learns from."""
