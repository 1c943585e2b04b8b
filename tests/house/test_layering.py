"""Imports point one way: the agent knows no platform, an adapter knows no agent or gateway."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from tests.source_trees import parsed

ROOT = Path(__file__).resolve().parents[2]


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved to their package)."""
    tree = parsed(path)
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                found.add(node.module)
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def offending(package: str, forbidden: tuple[str, ...]) -> dict[str, set[str]]:
    bad: dict[str, set[str]] = {}
    for path in modules(package):
        hits = {name for name in imports(path) if name.split(".")[0] in forbidden}
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    return bad


def test_the_agent_imports_no_gateway_and_no_platform() -> None:
    assert offending("agent", ("gateway", "adapters", "telegram", "discord")) == {}


def test_adapters_import_neither_the_agent_nor_the_gateway() -> None:
    assert offending("adapters", ("agent", "gateway")) == {}


def platform_packages() -> set[str]:
    """The platforms' folders: every package under adapters/ with a registration (``spec.py``)."""
    return {f"adapters.{path.parent.name}" for path in (ROOT / "adapters").glob("*/spec.py")}


def test_every_platform_folder_is_registered_once() -> None:
    from adapters.registry import PLATFORMS

    names = [spec.name for spec in PLATFORMS]
    assert len(names) == len(set(names))
    assert {f"adapters.{name}" for name in names} == platform_packages()


def test_only_the_registry_imports_a_platform() -> None:
    """A platform's folder is imported by itself and by ``adapters.registry``, nowhere else in Herald
    (tests and benchmarks drive adapters directly)."""
    packages = platform_packages()

    def within(name: str, package: str) -> bool:
        return name == package or name.startswith(f"{package}.")

    def foreign(path: Path, name: str) -> bool:
        return any(within(name, package) and not within(module_name(path), package) for package in packages)

    users = {
        str(path.relative_to(ROOT))
        for layer in HERALD
        for path in modules(layer)
        if any(foreign(path, name) for name in imports(path))
    }
    assert users == {"adapters/registry.py"}


PLATFORM_NAMES = ("telegram", "discord", "slack", "matrix", "whatsapp", "signal", "email")  # + registry
# "signal" is also the operating system's: Python's module, asyncio's handlers, a helper that signals a
# process tree, timeout(1)'s --signal flag, the word in an MCP server's last words. None names the platform.
OS_SIGNAL_NAMES = frozenset({"signal", "add_signal_handler", "remove_signal_handler", "signal_tree"})
OS_SIGNAL_STRINGS = ("--signal", "|signal|")
FROZEN = ("agent/db/migrations/versions/",)  # the schema's history names the tables it had
NOT_PLATFORMS = re.compile(r"user\.email")  # git's setting (agent/hands/proof.py), not the platform


def documentation(tree: ast.AST) -> set[tuple[int, int]]:
    """Where the module's docstrings start: every string that stands alone as a statement (a module's,
    class's or function's docstring, or an attribute's below it)."""
    return {
        (node.lineno, node.col_offset)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def platform_mentions(path: Path, names: tuple[str, ...]) -> list[str]:
    """Each identifier or string literal of ``path`` that names a platform (comments and docstrings
    left out): ``line: token``."""
    source = path.read_text(encoding="utf-8")
    docs = documentation(parsed(path))
    words = re.compile(rf"(?<![a-z])({'|'.join(names)})(?![a-z])")
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in OS_SIGNAL_NAMES:
            continue
        if token.type == tokenize.NAME:
            text = "_".join(re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", token.string).lower().split("_"))
        elif token.type == tokenize.STRING and token.start not in docs:
            text = NOT_PLATFORMS.sub("", token.string.lower())
            for word in OS_SIGNAL_STRINGS:
                text = text.replace(word, "")
        else:
            continue
        if words.search(text):
            found.append(f"{token.start[0]}: {token.string[:60]}")
    return found


def test_neither_the_gateway_nor_the_agent_names_a_platform() -> None:
    """What a platform is and does comes from its spec (``adapters.registry``): nothing in gateway/ or
    agent/ branches on a platform's name, reads its section, its token or its tables by name."""
    from adapters.registry import PLATFORMS

    names = tuple(sorted({*PLATFORM_NAMES, *(spec.name for spec in PLATFORMS)}))
    mentions = {
        str(path.relative_to(ROOT)): found
        for layer in ("gateway", "agent")
        for path in modules(layer)
        if not str(path.relative_to(ROOT)).startswith(FROZEN) and (found := platform_mentions(path, names))
    }
    assert mentions == {}


def test_the_platform_rule_sees_what_it_should() -> None:
    """The rule above finds a name in code and strings, not in comments and docstrings."""
    sample = ROOT / "tests" / "fixtures" / "platform_names.py"
    assert platform_mentions(sample, PLATFORM_NAMES) == [
        "8: TELEGRAM_TOKEN",
        '8: "TELEGRAM_BOT_TOKEN"',
        '9: "telegram"',
        "13: is_slack_up",
        '15: f"on {name} (Discord): {claim_leeway}"',
    ]


def test_the_gateway_never_imports_a_platform_sdk() -> None:
    assert offending("gateway", ("telegram", "discord")) == {}


def test_side_tasks_do_not_import_the_loop_that_builds_on_them() -> None:
    assert not any(name.startswith("agent.loop") for name in imports(ROOT / "agent" / "side.py"))


# Repositories outside agent/store: each is the one module that knows SQL for its kind of state.
REPOSITORIES = {
    "gateway/tables.py",  # the gateway's tables (declared, not queried)
    "agent/memory/database.py",
    "agent/skills/database.py",
    "gateway/conversation/chat_settings.py",
    "gateway/console/links.py",
    "gateway/console/reports.py",  # the console's read-only aggregates
    "gateway/cron/jobs.py",
    "gateway/platforms/records.py",
    "gateway/home/facts.py",
    "gateway/ledger/inbox.py",
    "gateway/ledger/outbox.py",
    "gateway/access/pairing.py",
    "gateway/openai_api/conversations.py",
    "gateway/approvals/records.py",  # commands held for approval
    "gateway/retention/records.py",  # pruning and forgetting the gateway's rows
}


def users_of(module: str) -> set[str]:
    return {
        str(path.relative_to(ROOT))
        for package in ("agent", "gateway", "adapters")
        for path in modules(package)
        if any(name.split(".")[0] == module for name in imports(path))
    }


def test_only_repositories_and_the_storage_layer_speak_sql() -> None:
    """SQLAlchemy (a connection, a statement, SQL text) only in the storage layer and the repositories;
    no sqlite3 anywhere but the SQLite storage itself (and the frozen migrations of old releases)."""
    layer = ("agent/db/", "agent/store/")
    above = {user for user in users_of("sqlalchemy") if not user.startswith(layer)}
    assert above <= REPOSITORIES, above - REPOSITORIES
    allowed = {"agent/db/sqlite.py", "agent/db/legacy.py"}
    assert users_of("sqlite3") <= allowed, users_of("sqlite3") - allowed


def test_every_reply_takes_one_road() -> None:
    """Only gateway.delivery.replies queues into the outbox; an approval queues its welcome inside its own
    transaction (gateway.access.pairing), so the welcome is queued before the person can write."""

    def users(call: str) -> set[str]:
        return {
            str(path.relative_to(ROOT))
            for path in modules("gateway")
            if call in path.read_text(encoding="utf-8")
        }

    assert users("outbox.enqueue(") <= {"gateway/delivery/replies.py"}, users("outbox.enqueue(")
    queuing = users("insert_items(")
    assert queuing <= {"gateway/ledger/outbox.py", "gateway/access/pairing.py"}, queuing


def test_resilience_is_neutral_ground() -> None:
    """Backoff, background loops and lease renewal serve every layer, so they import none of them (and
    no third-party library: nothing to install for an adapter that only needs a backoff)."""
    herald = ("agent", "gateway", "adapters", "tests")
    assert offending("resilience", herald) == {}
    third_party = {
        name for path in modules("resilience") for name in imports(path)
        if name.split(".")[0] not in {"resilience", "__future__", "asyncio", "contextlib", "dataclasses",
                                      "enum", "logging", "random", "types", "typing", "collections"}
    }  # fmt: skip
    assert third_party == set()


# The agent's doors (agent/api.py says what each is for): the gateway imports nothing else of it.
AGENT_DOORS = {
    "agent",
    "agent.api",
    "agent.settings",
    "agent.db",
    "agent.memory",
    "agent.skills",
    "agent.mcp",
    "agent.files",
}


def test_the_gateway_imports_the_agent_only_through_its_doors() -> None:
    behind = {
        str(path.relative_to(ROOT)): sorted(names)
        for path in modules("gateway")
        if (names := {name for name in imports(path) if name.split(".")[0] == "agent"} - AGENT_DOORS)
    }
    assert behind == {}


def api_exports() -> tuple[set[str], list[str]]:
    """What ``agent.api`` imports to offer (its ``from ... import`` names) and what its ``__all__`` lists."""
    tree = parsed(ROOT / "agent" / "api.py")
    offered = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module != "__future__"
        for alias in node.names
    }
    listed = next(
        [ast.literal_eval(element) for element in node.value.elts]
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
        and any(isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets)
    )  # fmt: skip
    return offered, listed


def api_users() -> dict[str, set[str]]:
    """Each name the gateway and the adapters import from ``agent.api``, and where."""
    used: dict[str, set[str]] = {}
    for package in ("gateway", "adapters"):
        for path in modules(package):
            for node in ast.walk(parsed(path)):
                if isinstance(node, ast.ImportFrom) and node.module == "agent.api":
                    for alias in node.names:
                        used.setdefault(alias.name, set()).add(str(path.relative_to(ROOT)))
    return used


def test_the_agents_door_offers_only_what_the_gateway_uses() -> None:
    """``agent.api`` is a surface, not a list of everything: each name it exports is imported by the
    gateway (or an adapter) somewhere, so a name nobody outside the agent uses goes back behind the door
    (tests import the agent's modules directly)."""
    offered, listed = api_exports()
    assert sorted(offered) == sorted(listed)
    assert offered - set(api_users()) == set()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path, known: set[str]) -> set[str]:
    """The Herald modules ``path`` imports when it runs (``if TYPE_CHECKING:`` blocks left out); ``from
    package import module`` is an import of the module, not of the package."""
    tree = parsed(path)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{prefix}.{base}" if base else prefix
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(base)
    return found & known


def test_no_module_imports_itself_in_a_circle() -> None:
    """Herald's modules form no import circle (a circle is a sign that one module does two modules'
    jobs, or that a type lives in the wrong one)."""
    paths = {module_name(path): path for package in HERALD for path in modules(package)}
    graph = {name: runtime_imports(path, set(paths)) for name, path in paths.items()}
    circles = [sorted(component) for component in strongly_connected(graph) if len(component) > 1]
    assert circles == []


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iteratively (the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


HERALD = ("agent", "gateway", "adapters", "resilience")
ROOM_SIZE = 22  # modules in one folder before it wants sub-packages by role


def test_no_folder_holds_more_rooms_than_a_reader_can_take_in() -> None:
    crowded = {
        str(folder.relative_to(ROOT)): count
        for package in HERALD
        for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]
        if (count := len(list(folder.glob("*.py")))) > ROOM_SIZE
    }
    assert crowded == {}


def test_the_gateway_stands_on_floors() -> None:
    """Every unit of ``gateway/`` (a first-level folder or a top-level file, as ``tests.layering_figures``
    measures them) imports only units below it: no package circle, no arrow up the floor order. The
    chat vocabulary and the ledger are the ground; the wiring (``gateway/wiring/``) is the top floor but
    for the entry points that open it (``app.py``, ``cli/``, ``doctor/``)."""
    from tests.layering_figures import figures

    shape = figures("gateway")
    assert (shape.circles, shape.upward) == ([], [])


# Who may import the composition (gateway.wiring: Services, Runtime, the chat core): the wiring itself and
# the entry points above it. Every other part takes a narrow context of its own (a protocol naming what it
# reads: gateway.conversation.context, gateway.cron.runner.CronServices, gateway.commands.CommandServices,
# gateway.console.pages.ConsoleServices, gateway.openai_api.server.ApiServices, gateway.intake.handling).
WIRING_AND_ENTRY_POINTS = ("gateway/wiring/", "gateway/app.py", "gateway/cli/", "gateway/doctor/")
BAG_NAMES = {"Services", "Runtime"}


def wiring_imports(path: Path) -> set[str]:
    """What ``path`` imports of the wiring (``if TYPE_CHECKING:`` imports included): a module of
    ``gateway.wiring`` (``from gateway import wiring`` too), or a name Services or Runtime from anywhere in
    the gateway (a re-export too)."""

    def wiring(name: str) -> bool:
        return name == "gateway.wiring" or name.startswith("gateway.wiring.")

    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if wiring(alias.name))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = {f"{node.module}.{alias.name}": alias.name for alias in node.names}
            found.update({node.module} if wiring(node.module) else set())
            found.update(full for full, name in names.items() if wiring(full) or (
                name in BAG_NAMES and node.module.startswith("gateway")))  # fmt: skip
    return found


def test_only_the_wiring_and_the_entry_points_import_services_or_runtime() -> None:
    """``Services`` and ``Runtime`` (and the rest of ``gateway.wiring``) are imported by the wiring and the
    entry points only: a part below that imported them could reach for the whole house, and would point
    an arrow up at the floor that builds it."""
    reaching = {
        where: sorted(hits)
        for package in HERALD
        for path in modules(package)
        if not (where := str(path.relative_to(ROOT))).startswith(WIRING_AND_ENTRY_POINTS)
        and (hits := wiring_imports(path))
    }
    assert reaching == {}


def test_the_wiring_rule_sees_what_it_should() -> None:
    """The rule above finds a type-only import and a re-exported bag, not a narrow context."""
    sample = ROOT / "tests" / "fixtures" / "wiring_imports.py"
    assert wiring_imports(sample) == {
        "gateway.wiring",
        "gateway.wiring.services",
        "gateway.wiring.services.Services",
        "gateway.app.Services",
    }


def herald_imports(path: Path) -> set[str]:
    """What ``path`` imports of Herald, ``if TYPE_CHECKING:`` imports included."""
    return {name for name in imports(path) if name.split(".")[0] in HERALD}


def test_the_agent_stands_on_floors() -> None:
    """Every unit of ``agent/`` imports only units below it: no package circle, and no arrow that points
    up the floor order, so a reader can start at the ground floor (``agent.model``) and go up."""
    from tests.layering_figures import figures

    shape = figures("agent")
    assert (shape.circles, shape.upward) == ([], [])


# What the model vocabulary may stand on: the prompt and cache-policy words it carries, usage, valid text.
MODEL_GROUND = {"agent.cache_policy", "agent.prompt", "agent.usage", "agent.files.text"}


def test_the_model_vocabulary_is_the_agents_ground_floor() -> None:
    """``agent.model`` (messages, media and their wire forms, the token estimate, the provider's request,
    response and error) imports nothing above it: every other floor of the agent may use it."""
    above = {
        str(path.relative_to(ROOT)): sorted(hits)
        for path in modules("agent/model")
        if (hits := {n for n in herald_imports(path) if n.rpartition(".")[0] != "agent.model"} - MODEL_GROUND)
    }
    assert above == {}


def test_intake_knows_no_handler() -> None:
    """Intake stores a message and schedules it; what the message becomes (a turn, a command's reply) is
    the handlers' business, passed in by the wiring (``gateway.intake.handling``). So intake imports no
    handler and not the Services bag that holds them."""
    handlers = ("gateway.conversation", "gateway.commands", "gateway.cron", "gateway.openai_api",
                "gateway.wiring")  # fmt: skip
    knowing = {
        str(path.relative_to(ROOT)): sorted(hits)
        for path in modules("gateway/intake")
        if (hits := {name for name in herald_imports(path) if name.startswith(handlers)})
    }
    assert knowing == {}


def test_the_chat_vocabulary_and_the_ledger_are_ground_floors() -> None:
    """``gateway.chats`` imports nothing of the gateway; the ledger only the gateway's tables."""
    assert {
        name for name in herald_imports(ROOT / "gateway" / "chats.py") if name.startswith("gateway")
    } == set()
    above = {
        str(path.relative_to(ROOT)): sorted(hits)
        for path in modules("gateway/ledger")
        if (hits := {n for n in herald_imports(path) if n.startswith("gateway") and
                     not n.startswith(("gateway.ledger", "gateway.tables"))})
    }  # fmt: skip
    assert above == {}


KEY_GRAMMAR = re.compile(r":(dm|group|topic|conversation):|[\"']cron:[\"'{]")


def key_grammar(path: Path) -> list[str]:
    """Each string literal of ``path`` (docstrings left out) that spells a session key's separators."""
    source = path.read_text(encoding="utf-8")
    docs = documentation(parsed(path))
    return [
        f"{token.start[0]}: {token.string[:60]}"
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.STRING and token.start not in docs and KEY_GRAMMAR.search(token.string)
    ]


def test_the_session_key_grammar_has_one_home() -> None:
    """Session keys are written and read by ``gateway.chats`` only: a second writer or reader drifts."""
    spelled = {
        str(path.relative_to(ROOT)): found for path in modules("gateway") if (found := key_grammar(path))
    }
    assert set(spelled) == {"gateway/chats.py"}, spelled
