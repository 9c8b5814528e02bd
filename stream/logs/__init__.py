"""Reading dsh session logs from disk (``.jsonl``, ``.jsonl.zstd``) — the offline edge."""
