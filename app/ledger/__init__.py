"""The privacy ledger: admission against a dataset's budget, and its append-only history."""
