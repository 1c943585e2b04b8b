"""Skills: folders of instructions that the model loads on demand.

Only an index (name, description, category) goes into the system prompt's stable layer, which is
shared by every chat of a bot, so the index must be byte-identical for the same skills: it is sorted,
and nothing in it depends on the backend, the machine or the order things were found in. Skill bodies
and their extra files are loaded later with the skill_view tool and appended to the conversation,
never spliced into the system prompt.

- :mod:`agent.skills.rules`: SKILL.md, the index and its bytes, confined paths, caps (pure functions
  shared by every backend).
- :mod:`agent.skills.library`: :class:`SkillLibrary`, the async API, over a :class:`SkillTree` backend.
- Backends: :mod:`agent.skills.files` (folders under ``HERALD_HOME/skills``, the default with SQLite)
  and :mod:`agent.skills.database` (the ``skill_files`` table, with PostgreSQL).
- :mod:`agent.skills.bundles`: reading skill folders from disk to import them.
"""

from agent.skills.bundles import Unreadable, read_bundles
from agent.skills.database import DatabaseSkillTree
from agent.skills.files import DiskSkillTree
from agent.skills.library import Bundle, SkillLibrary, SkillTree
from agent.skills.rules import (
    DEFAULT_CATEGORY,
    MAX_SKILL_FILE_BYTES,
    SKILL_FILE,
    VIEW_TOOL,
    SkillError,
    SkillIndex,
    SkillInfo,
    format_skills_index,
    split_front_matter,
)

__all__ = [
    "DEFAULT_CATEGORY",
    "MAX_SKILL_FILE_BYTES",
    "SKILL_FILE",
    "VIEW_TOOL",
    "Bundle",
    "DatabaseSkillTree",
    "DiskSkillTree",
    "SkillError",
    "SkillIndex",
    "SkillInfo",
    "SkillLibrary",
    "SkillTree",
    "Unreadable",
    "format_skills_index",
    "read_bundles",
    "split_front_matter",
]
