"""From results to a decision: recommendation, cost model, report, dashboard body."""
