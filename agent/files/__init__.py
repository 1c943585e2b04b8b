"""Files Herald writes and reads: privately (0600 in a 0700 home) and atomically, text made valid UTF-8,
YAML read strictly (a key given twice is an error with its lines); a lock file that names its holders."""

from agent.files.atomic import atomic_write_text
from agent.files.flock import LockHeld, take_lock
from agent.files.private import (
    PRIVATE_FILE,
    create_private_file,
    loose_permissions,
    make_private_dirs,
    on_read_only_file_system,
)
from agent.files.text import read_text, valid_text
from agent.files.yaml_text import DuplicateKey, load_yaml

__all__ = [
    "PRIVATE_FILE",
    "DuplicateKey",
    "LockHeld",
    "atomic_write_text",
    "create_private_file",
    "load_yaml",
    "loose_permissions",
    "make_private_dirs",
    "on_read_only_file_system",
    "read_text",
    "take_lock",
    "valid_text",
]
