"""Resource caps for reading hostile forks and packages (docs/vendoring.md, "Limits"). Each one turns into a
finding or an exit-2 "could not check", never a crash or unbounded memory."""

from __future__ import annotations

DIAGNOSE_MAX_BYTES = 1 << 20  # larger files are hashed (streaming) but get no cosmetic check, ratio or diff
STAMP_MAX_BYTES = 1 << 20  # a larger stamp is an invalid stamp, not read
MEMBER_MAX_BYTES = 64 << 20  # an archive member above this is not decompressed: `too-large`
MEMBER_MAX_RATIO = 200  # ... nor one whose compression ratio is above this (when over 1 MiB)
RATIO_FLOOR_BYTES = 1 << 20  # small members may compress well without suspicion
ARCHIVE_MAX_BYTES = 1 << 30  # a download, or a tar stream's uncompressed size, beyond this: exit 2
DIFF_LINE_CHARS = 1000  # text / markdown cut each diff line here
