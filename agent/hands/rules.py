"""Why a command waits for the owner's yes: the built-in rules, and the owner's own patterns.

Whether it waits is decided first by :class:`Judge`: every command that ``agent.hands.proof`` cannot
prove harmless waits. The rules below no longer let anything through; they say *why* a command is
held ("deletes recursively", "runs code it downloads"), and what the session's button may not cover
(``agent.tools.approval.NOT_FOR_SESSION``).

A command is read as bash will run it (``agent.hands.shell_words``), so quoting (``r""m``), escapes
(``\\rm``, ``$'\\x72m'``), paths (``/bin/rm``), wrappers (``sudo``, ``env``, ``nice``, ``timeout``,
``xargs``, ``find -exec``), nested shells (``bash -c '...'``, ``eval``, ``ssh host '...'``, a
here-document fed to ``sh``) and substitutions (``$(...)``) do not hide what runs. Each rule looks at
every command that runs. What cannot be read for sure (a command name in a variable, ``eval "$x"``, an
unclosed quote) is itself a finding (rule ``opaque``); a command held with no rule naming it is
``unproven`` ("is not known to be harmless: 'make' is not on tools.safe_commands").

This reader is hand-written and misses forms (a function body, ``[[ ]]``), which is why it only
explains: the proof reads with a real grammar and fails closed. Pure: no I/O but resolving paths.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from agent.hands.paths import Confinement, inside, real
from agent.hands.proof import BUILTIN_SAFE, Prover
from agent.hands.shell_words import Command, Script, Unreadable, Word, parse
from agent.tools.approval import Finding

LABELS = {
    "recursive_delete": "deletes recursively or destroys files",
    "superuser": "runs as another user",
    "devices": "writes to a device or formats a disk",
    "outside_paths": "writes outside the workspace and tools.allowed_paths",
    "herald_home": "touches Herald's own files (its configuration, keys or database)",
    "shell_pipe": "feeds text into a shell or interpreter",
    "kill": "stops processes, containers, services or the machine",
    "packages": "installs or removes packages",
    "git_force": "rewrites or discards git history or work",
    "permissions": "changes permissions or owners recursively, or sets setuid",
    "system": "changes the system's configuration",
    "opaque": "cannot be read for sure",
    "fork_bomb": "is a fork bomb",
    "downloaded_code": "runs code it downloads",
    "unproven": "is not known to be harmless",
}
DOWNLOADERS = frozenset({"curl", "wget", "aria2c", "fetch", "scp", "rsync"})
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "tcsh", "csh", "yash"})
INTERPRETER = re.compile(
    r"(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|php[0-9.]*|lua[0-9.]*)"
)
INLINE_CODE = {
    "python": ("-c", "-m"),
    "pypy": ("-c", "-m"),
    "perl": ("-e", "-E"),
    "ruby": ("-e",),
    "node": ("-e", "-p", "--eval", "--print"),
    "nodejs": ("-e", "-p", "--eval", "--print"),
    "php": ("-r",),
    "lua": ("-e",),
}
SUPERUSER = frozenset({"sudo", "doas", "su", "pkexec", "run0", "runuser", "sudoedit", "chroot"})
# Wrappers that run the rest of their words as a command: their options that take a value, and how many
# words (after the options) are theirs before the command starts.
WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "sudo": (
        frozenset(
            [
                "-u",
                "-g",
                "-C",
                "-D",
                "-h",
                "-p",
                "-r",
                "-t",
                "-T",
                "-U",
                "-R",
                "--user",
                "--group",
                "--close-from",
                "--chdir",
                "--host",
                "--prompt",
                "--role",
                "--type",
                "--command-timeout",
                "--other-user",
                "--chroot",
            ]
        ),
        0,
    ),
    "doas": (frozenset({"-u", "-C"}), 0),
    "run0": (
        frozenset(
            [
                "-u",
                "-g",
                "-D",
                "--user",
                "--group",
                "--chdir",
                "--setenv",
                "--unit",
                "--property",
                "--description",
                "--slice",
                "--nice",
            ]
        ),
        0,
    ),
    "pkexec": (frozenset({"--user"}), 0),
    "runuser": (
        frozenset(
            [
                "-u",
                "-g",
                "-G",
                "--user",
                "--group",
                "--supp-group",
                "-s",
                "--shell",
                "-w",
                "--whitelist-environment",
            ]
        ),
        0,
    ),
    "env": (frozenset(["-u", "-C", "-S", "--unset", "--chdir", "--split-string"]), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (
        frozenset(["-c", "-n", "-p", "-P", "-u", "--class", "--classdata", "--pid", "--pgid", "--uid"]),
        0,
    ),
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "-o", "--format", "--output"}), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
    "stdbuf": (frozenset(["-i", "-o", "-e", "--input", "--output", "--error"]), 0),
    "setsid": (frozenset(), 0),
    "chroot": (frozenset({"--userspec", "--groups"}), 1),
    "xargs": (
        frozenset(
            [
                "-a",
                "-d",
                "-E",
                "-e",
                "-I",
                "-i",
                "-L",
                "-l",
                "-n",
                "-P",
                "-s",
                "--arg-file",
                "--delimiter",
                "--eof",
                "--replace",
                "--max-lines",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ]
        ),
        0,
    ),
    "flock": (frozenset({"-w", "-E", "--timeout", "--conflict-exit-code"}), 1),
    "strace": (frozenset(["-o", "-e", "-p", "-s", "-u", "-E", "-P", "-I", "-a", "-b", "-X", "-O", "-S"]), 0),
    "ltrace": (frozenset(["-o", "-e", "-p", "-s", "-u", "-a", "-n", "-x", "-L"]), 0),
    "unbuffer": (frozenset(), 0),
    "watch": (frozenset({"-n", "--interval", "-q", "--equexit"}), 0),
    "busybox": (frozenset(), 0),
    "caffeinate": (frozenset({"-t", "-w"}), 0),
    "systemd-run": (
        frozenset(
            [
                "-u",
                "-p",
                "-E",
                "--unit",
                "--property",
                "--setenv",
                "--uid",
                "--gid",
                "--nice",
                "--working-directory",
                "--slice",
                "--description",
            ]
        ),
        0,
    ),
}
KILLERS = frozenset(
    {"kill", "killall", "killall5", "pkill", "skill", "xkill", "shutdown", "reboot", "halt", "poweroff"}
)
SYSTEMCTL_KILL = frozenset(
    [
        "stop",
        "kill",
        "restart",
        "try-restart",
        "reload-or-restart",
        "isolate",
        "poweroff",
        "reboot",
        "halt",
        "suspend",
        "hibernate",
        "hybrid-sleep",
        "rescue",
        "emergency",
        "kexec",
        "exit",
        "soft-reboot",
    ]
)
SYSTEMCTL_SYSTEM = frozenset(
    [
        "enable",
        "disable",
        "mask",
        "unmask",
        "set-default",
        "link",
        "preset",
        "preset-all",
        "edit",
        "revert",
        "daemon-reexec",
        "set-property",
    ]
)
CONTAINER_VERBS = frozenset({"kill", "stop", "rm", "rmi", "restart", "prune", "down"})
SYSTEM_COMMANDS = frozenset(
    [
        "mount",
        "umount",
        "swapon",
        "swapoff",
        "iptables",
        "ip6tables",
        "iptables-restore",
        "ip6tables-restore",
        "nft",
        "ufw",
        "firewall-cmd",
        "useradd",
        "userdel",
        "usermod",
        "groupadd",
        "groupdel",
        "groupmod",
        "passwd",
        "chpasswd",
        "chage",
        "visudo",
        "vipw",
        "vigr",
        "adduser",
        "deluser",
        "addgroup",
        "delgroup",
        "modprobe",
        "insmod",
        "rmmod",
        "update-grub",
        "grub-install",
        "grub-mkconfig",
        "efibootmgr",
        "ifdown",
        "ifup",
        "update-alternatives",
        "setenforce",
    ]
)
DISK_COMMANDS = frozenset(
    [
        "mke2fs",
        "mkswap",
        "mkntfs",
        "mkdosfs",
        "fdisk",
        "sfdisk",
        "cfdisk",
        "gdisk",
        "sgdisk",
        "parted",
        "wipefs",
        "blkdiscard",
        "hdparm",
        "cryptsetup",
        "lvremove",
        "vgremove",
        "pvremove",
        "lvreduce",
        "mdadm",
        "zpool",
        "badblocks",
        "losetup",
    ]
)
SAFE_DEVICES = frozenset(
    [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/stdin",
        "/dev/tty",
    ]
)
PACKAGE_VERBS: dict[str, frozenset[str]] = {
    "apt": frozenset(
        ["install", "remove", "purge", "upgrade", "full-upgrade", "dist-upgrade", "autoremove", "reinstall"]
    ),
    "apt-get": frozenset(
        ["install", "remove", "purge", "upgrade", "dist-upgrade", "autoremove", "reinstall", "build-dep"]
    ),
    "aptitude": frozenset(
        ["install", "remove", "purge", "upgrade", "safe-upgrade", "full-upgrade", "reinstall"]
    ),
    "yum": frozenset(
        ["install", "remove", "erase", "update", "upgrade", "reinstall", "downgrade", "groupinstall"]
    ),
    "dnf": frozenset(
        ["install", "remove", "erase", "update", "upgrade", "reinstall", "downgrade", "group", "autoremove"]
    ),
    "microdnf": frozenset(["install", "remove", "update", "upgrade", "reinstall"]),
    "zypper": frozenset(["install", "in", "remove", "rm", "update", "up", "dist-upgrade", "dup", "patch"]),
    "apk": frozenset(["add", "del", "upgrade", "fix"]),
    "snap": frozenset(["install", "remove", "refresh", "revert"]),
    "flatpak": frozenset(["install", "uninstall", "update"]),
    "brew": frozenset(["install", "uninstall", "remove", "reinstall", "upgrade"]),
    "port": frozenset(["install", "uninstall", "upgrade"]),
    "pip": frozenset({"install", "uninstall"}),
    "pipx": frozenset({"install", "uninstall", "reinstall", "upgrade"}),
    "gem": frozenset({"install", "uninstall", "update"}),
    "cargo": frozenset({"install", "uninstall"}),
    "go": frozenset({"install"}),
    "conda": frozenset(["install", "remove", "uninstall", "update", "upgrade"]),
    "mamba": frozenset(["install", "remove", "uninstall", "update", "upgrade"]),
    "nix-env": frozenset({"-i", "--install", "-e", "--uninstall", "-u", "--upgrade"}),
}
NODE_PACKAGERS = frozenset({"npm", "pnpm", "yarn", "bun"})
FORK_BOMB = re.compile(r"(\S+)\s*\(\s*\)\s*\{[^}]*\1\s*\|\s*&?\s*\1[^}]*&")
PIP = re.compile(r"pip[0-9.]*")
MKFS = re.compile(r"mkfs(\..+)?")


@dataclass(frozen=True)
class Places:
    """Where commands may write without asking, and what is Herald's own."""

    confinement: Confinement  # the workspace (commands' folder) and tools.allowed_paths
    herald_home: Path | None  # real; None: not to be guarded (tests)
    scratch: tuple[Path, ...] = ()  # temporary folders commands may write in

    @classmethod
    def of(cls, confinement: Confinement, herald_home: Path | None) -> Places:
        folders = {tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"}
        return cls(
            confinement, real(herald_home) if herald_home else None, tuple(real(Path(f)) for f in folders)
        )


@dataclass
class _Reading:
    """What reading one command found so far."""

    cwd: Path | None  # where relative paths start; None after a cd Herald could not follow
    findings: list[Finding] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # each command as run (for the owner's patterns)
    depth: int = 0


class Judge:
    """Holds every command not proven harmless (``agent.hands.proof``); the enabled rules and the owner's
    patterns say why, and the patterns hold even a harmless one.

    ``sandboxed``: commands run in a sandbox (tools.sandbox), which is the boundary: a command no rule
    names runs there without asking even when it is not proven harmless (like ``execute_code``)."""

    def __init__(
        self,
        rules: Collection[str],
        patterns: Sequence[tuple[str, str]],
        places: Places,
        *,
        safe: Sequence[str] = BUILTIN_SAFE,
        sandboxed: bool = False,
    ) -> None:
        unknown = set(rules) - set(LABELS)
        if unknown:
            raise ValueError(f"unknown approval rules: {', '.join(sorted(unknown))}")
        self.rules = frozenset(rules)
        self.patterns = [(name, re.compile(pattern)) for name, pattern in patterns]
        self.places = places
        self.prover = Prover(safe, places.confinement, places.herald_home)
        self.sandboxed = sandboxed

    def findings(self, command: str) -> tuple[Finding, ...]:
        """Why ``command`` waits for the owner (empty: it runs without asking)."""
        unproven = self.prover.problem(command)
        found = self._explained(command)
        patterns = tuple(finding for finding in found if finding.rule.startswith("pattern:"))
        if unproven is None:
            return patterns
        named = tuple(finding for finding in found if not finding.rule.startswith("pattern:"))
        if named:
            return found
        if self.sandboxed and not unproven.opaque:
            return patterns
        rule = "opaque" if unproven.opaque else "unproven"
        return (Finding(rule, f"{LABELS[rule]}: {unproven.why}"), *patterns)

    def _explained(self, command: str) -> tuple[Finding, ...]:
        """What the rules and the owner's patterns find in ``command``: the question's reasons."""
        reading = _Reading(cwd=self.places.confinement.workspace)
        try:
            script = parse(command)
        except Unreadable as problem:
            reading.findings.append(Finding("opaque", f"{LABELS['opaque']}: {problem}"))
        else:
            self._script(script, reading)
        if FORK_BOMB.search(command):
            reading.findings.append(Finding("fork_bomb", LABELS["fork_bomb"]))
        if _runs_downloaded(reading.texts):
            reading.findings.append(Finding("downloaded_code", LABELS["downloaded_code"]))
        for name, pattern in self.patterns:
            if any(pattern.search(text) for text in (command, *reading.texts)):
                reading.findings.append(Finding(f"pattern:{name}", name))
        kept: dict[tuple[str, str], Finding] = {}
        for finding in reading.findings:
            if finding.rule in self.rules or finding.rule.startswith("pattern:"):
                kept.setdefault((finding.rule, finding.what), finding)
        return tuple(kept.values())

    # --- walking the script -------------------------------------------------------------------------

    def _script(self, script: Script, reading: _Reading) -> None:
        if reading.depth > 8:
            reading.findings.append(Finding("opaque", f"{LABELS['opaque']}: shells nested too deep"))
            return
        for pipeline in script.pipelines:
            shown = []
            for command in pipeline:
                self._command(command, reading)
                shown.append(" ".join(word.text for word in command.words))
            if len(pipeline) > 1:
                reading.texts.append(" | ".join(shown))
        for nested in script.substitutions:
            self._nested(nested, reading)

    def _nested(self, script: Script, reading: _Reading) -> None:
        reading.depth += 1
        try:
            self._script(script, reading)
        finally:
            reading.depth -= 1

    def _text(self, text: str, reading: _Reading, where: str) -> None:
        """Shell text run by a command (``bash -c``, ``eval``, a here-document): read it too."""
        try:
            script = parse(text)
        except Unreadable as problem:
            reading.findings.append(Finding("opaque", f"{LABELS['opaque']}: {where}: {problem}"))
            return
        self._nested(script, reading)

    def _command(self, command: Command, reading: _Reading) -> None:
        for redirect in command.redirects:
            if redirect.writes:
                self._written(redirect.target, reading, f"> {redirect.target.text}")
            elif redirect.op in ("<", "<>"):
                self._touched(redirect.target, reading)
        self._argv(list(command.words), command, reading)

    def _argv(self, words: list[Word], command: Command, reading: _Reading) -> None:
        """Judge one command as it will run: unwrap wrappers, then apply the rules to what is left."""
        while words:
            head = words[0]
            if not head.literal:
                self._find(reading, "opaque", f"the command's name is only known when it runs ({head.text})")
                return
            if head.braces:
                self._find(reading, "opaque", f"brace expansion decides which command runs ({head.text})")
                return
            name = PurePosixPath(head.text).name if "/" in head.text else head.text
            args = words[1:]
            reading.texts.append(" ".join([name, *(word.text for word in args)]))
            for word in args:
                self._touched(word, reading)
            if name in SUPERUSER:
                self._find(reading, "superuser", " ".join([name, *(w.text for w in args[:3])]))
            if name in ("command", "type", "which") and any(w.text in ("-v", "-V") for w in args):
                return  # only looks the name up
            if name == "su":
                script = _option_value(args, ("-c", "--command"))
                if script is not None:
                    self._shell_text(script, reading, "su -c")
                return
            if name == "env" and (split := _option_value(args, ("-S", "--split-string"))) is not None:
                self._shell_text(split, reading, "env -S")
                return
            if name == "watch":
                rest = _after_options(args, WRAPPERS["watch"][0])
                if rest:
                    self._shell_text(
                        Word(" ".join(w.text for w in rest), all(w.literal for w in rest)), reading, "watch"
                    )
                return
            if name == "flock" and (script := _option_value(args, ("-c", "--command"))) is not None:
                self._shell_text(script, reading, "flock -c")
                return
            if name in WRAPPERS:
                options, positional = WRAPPERS[name]
                rest = _after_options(args, options, keep_assignments=name != "env")
                rest = rest[positional:]
                if name == "exec" and not rest:
                    return
                if name == "xargs" and not rest:
                    return  # runs echo
                words = rest
                continue
            self._rules(name, args, command, reading)
            return

    def _rules(self, name: str, args: list[Word], command: Command, reading: _Reading) -> None:
        texts = [word.text for word in args]
        if name in SHELLS:
            self._shell(name, args, command, reading)
        elif INTERPRETER.fullmatch(name):
            self._interpreter(name, args, command, reading)
        elif name == "eval":
            self._shell_text(Word(" ".join(texts), all(w.literal for w in args)), reading, "eval")
        elif name in ("source", "."):
            if args and not args[0].literal and args[0].text.startswith(("<(", "$(")):
                self._find(reading, "shell_pipe", f"{name} runs the output of a command ({args[0].text})")
        elif name == "ssh":
            remote = _after_options(
                args,
                frozenset(
                    [
                        "-b",
                        "-c",
                        "-D",
                        "-E",
                        "-e",
                        "-F",
                        "-I",
                        "-i",
                        "-J",
                        "-L",
                        "-l",
                        "-m",
                        "-O",
                        "-o",
                        "-p",
                        "-Q",
                        "-R",
                        "-S",
                        "-W",
                        "-w",
                    ]
                ),
            )
            if len(remote) > 1:
                self._shell_text(
                    Word(" ".join(w.text for w in remote[1:]), all(w.literal for w in remote[1:])),
                    reading,
                    f"ssh {remote[0].text}",
                )
        elif name == "find":
            self._find_command(args, command, reading)
        elif name in ("rm", "shred"):
            self._remove(name, args, reading)
        elif name in ("rmdir", "unlink", "touch", "mkdir", "truncate", "tee", "mv"):
            for target in _positionals(
                args,
                {"truncate": {"-s", "--size", "-r", "--reference"}, "mkdir": {"-m", "--mode"}}.get(
                    name, set()
                ),
            ):
                self._written(target, reading, f"{name} {target.text}")
        elif name in ("cp", "install", "ln", "rsync", "scp"):
            self._copy(name, args, reading)
        elif name in ("chmod", "chown", "chgrp"):
            self._permissions(name, args, reading)
        elif name == "dd":
            for text, word in zip(texts, args, strict=True):
                if text.startswith("of="):
                    self._written(Word(text[3:], word.literal), reading, f"dd {text}")
        elif name == "sed":
            self._sed(args, reading)
        elif name in ("tar", "unzip", "curl", "wget"):
            for target in _output_targets(name, args):
                self._written(target, reading, f"{name} {target.text}")
        elif name == "git":
            self._git(args, reading)
        elif name in ("cd", "pushd", "popd"):
            self._cd(name, args, reading)
        elif name in KILLERS or (name in ("init", "telinit") and texts[:1] in (["0"], ["6"], ["1"], ["S"])):
            self._find(reading, "kill", " ".join([name, *texts[:3]]))
        elif name == "systemctl":
            verbs = [t for t in texts if not t.startswith("-")]
            if verbs and verbs[0] in SYSTEMCTL_KILL:
                self._find(reading, "kill", f"systemctl {' '.join(verbs[:2])}")
            elif verbs and verbs[0] in SYSTEMCTL_SYSTEM:
                self._find(reading, "system", f"systemctl {' '.join(verbs[:2])}")
        elif name == "service" and len(texts) >= 2 and texts[1] in ("stop", "restart", "force-reload"):
            self._find(reading, "kill", f"service {texts[0]} {texts[1]}")
        elif name in ("docker", "podman", "nerdctl"):
            verbs = [t for t in texts if not t.startswith("-")]
            if any(verb in CONTAINER_VERBS for verb in verbs[:3]):
                self._find(reading, "kill", f"{name} {' '.join(verbs[:3])}")
        elif name in SYSTEM_COMMANDS or (name == "crontab" and "-l" not in texts):
            self._find(reading, "system", " ".join([name, *texts[:3]]))
        elif name in ("sysctl", "hostnamectl", "timedatectl", "ip", "ifconfig", "nmcli"):
            self._network_or_kernel(name, texts, reading)
        elif name in DISK_COMMANDS or MKFS.fullmatch(name) or name in ("zfs", "dmsetup"):
            if name not in ("zfs", "dmsetup") or any(t in ("destroy", "remove", "remove_all") for t in texts):
                self._find(reading, "devices", " ".join([name, *texts[:3]]))
        else:
            self._packages(name, texts, reading)

    # --- the rules by kind of command ---------------------------------------------------------------

    def _shell(self, name: str, args: list[Word], command: Command, reading: _Reading) -> None:
        script: Word | None = None
        file: Word | None = None
        reads_stdin = False
        position = 0
        while position < len(args):
            word = args[position]
            text = word.text
            if text == "--":
                position += 1
                break
            if text in ("-o", "+o", "--rcfile", "--init-file"):
                position += 2
                continue
            if text.startswith("-") and not text.startswith("--") and len(text) > 1:
                if "c" in text[1:]:
                    script = args[position + 1] if position + 1 < len(args) else Word("")
                    break
                reads_stdin = reads_stdin or "s" in text[1:]
                position += 1
                continue
            if text.startswith("--"):
                position += 1
                continue
            break
        if script is not None:
            self._shell_text(script, reading, f"{name} -c")
            return
        if position < len(args) and not reads_stdin:
            file = args[position]
        if file is not None:
            if not file.literal and file.text.startswith(("<(", "$(")):
                self._find(reading, "shell_pipe", f"{name} runs the output of a command ({file.text})")
            return
        self._stdin_program(name, command, reading)

    def _interpreter(self, name: str, args: list[Word], command: Command, reading: _Reading) -> None:
        family = re.sub(r"[0-9.]+$", "", name)
        inline = INLINE_CODE.get(family, ())
        texts = [word.text for word in args]
        if family in ("python", "pypy") and "-m" in texts:
            module = texts.index("-m") + 1
            if module < len(texts) and PIP.fullmatch(texts[module]):
                self._packages("pip", texts[module + 1 :], reading)
            return
        if any(
            text in inline or any(text.startswith(flag) for flag in inline if len(flag) == 2)
            for text in texts
        ):
            return
        positionals = [word for word in args if not word.text.startswith("-") or word.text == "-"]
        if positionals and positionals[0].text != "-":
            first = positionals[0]
            if not first.literal and first.text.startswith(("<(", "$(")):
                self._find(reading, "shell_pipe", f"{name} runs the output of a command ({first.text})")
            return
        self._stdin_program(name, command, reading)

    def _stdin_program(self, name: str, command: Command, reading: _Reading) -> None:
        """A shell or interpreter reading its program from standard input: from another command's output
        (held: nobody sees that program), or from a here-document (a shell's is read like the rest)."""
        for redirect in command.redirects:
            if redirect.body is not None and name in SHELLS:
                self._text(redirect.body, reading, f"the text fed to {name}")
                return
            if redirect.body is not None:
                return  # a program written out in the command, like -c: nothing hidden
        if command.piped:
            self._find(reading, "shell_pipe", f"pipes text into {name}")

    def _shell_text(self, script: Word, reading: _Reading, where: str) -> None:
        if not script.literal:
            self._find(reading, "opaque", f"{where} runs text only known when it runs ({script.text})")
            return
        self._text(script.text, reading, where)

    def _find_command(self, args: list[Word], command: Command, reading: _Reading) -> None:
        position = 0
        while position < len(args):
            text = args[position].text
            if text == "-delete":
                self._find(reading, "recursive_delete", "find … -delete")
            if text in ("-exec", "-execdir", "-ok", "-okdir"):
                end = position + 1
                while end < len(args) and args[end].text not in (";", "+"):
                    end += 1
                inner = [word for word in args[position + 1 : end] if word.text != "{}"]
                self._argv(inner, Command(tuple(inner)), reading)
                position = end
            position += 1

    def _remove(self, name: str, args: list[Word], reading: _Reading) -> None:
        recursive = name == "shred"
        for word in _options(args):
            text = word.text
            if text in ("--recursive",) or (not text.startswith("--") and ("r" in text or "R" in text)):
                recursive = True
        targets = _positionals(args, {"-n", "--iterations", "-s", "--size"} if name == "shred" else set())
        if recursive:
            shown = " ".join(w.text for w in targets[:3]) or "(no path)"
            self._find(reading, "recursive_delete", f"{name} {shown}")
        for target in targets:
            self._written(target, reading, f"{name} {target.text}")

    def _copy(self, name: str, args: list[Word], reading: _Reading) -> None:
        texts = [word.text for word in args]
        if name == "rsync" and any(
            text.startswith("--delete") or text == "--remove-source-files" for text in texts
        ):
            self._find(reading, "recursive_delete", "rsync --delete")
        target = _option_value(args, ("-t", "--target-directory"))
        if target is None:
            positionals = _positionals(
                args,
                {
                    "-S",
                    "--suffix",
                    "-m",
                    "--mode",
                    "-o",
                    "--owner",
                    "-g",
                    "--group",
                    "-e",
                    "--rsh",
                    "-i",
                    "-P",
                    "-l",
                    "-F",
                },
            )
            target = positionals[-1] if len(positionals) >= 2 else None
        if target is None:
            return
        if name in ("rsync", "scp") and _remote(target.text):
            return
        self._written(target, reading, f"{name} … {target.text}")

    def _permissions(self, name: str, args: list[Word], reading: _Reading) -> None:
        options = [word.text for word in _options(args)]
        positionals = _positionals(args, set())
        if "--recursive" in options or any("R" in text for text in options if not text.startswith("--")):
            self._find(reading, "permissions", f"{name} -R {' '.join(w.text for w in positionals[:2])}")
        if name == "chmod" and positionals:
            mode = positionals[0].text
            if re.fullmatch(r"[2-7][0-7]{3}", mode) or re.search(r"[+=][rwxXt]*s", mode):
                self._find(reading, "permissions", f"chmod {mode} (setuid or setgid)")
        references = any(text.startswith("--reference") for text in options)
        for target in positionals if references else positionals[1:]:
            self._written(target, reading, f"{name} {target.text}")

    def _sed(self, args: list[Word], reading: _Reading) -> None:
        texts = [word.text for word in args]
        in_place = any(
            t == "--in-place" or t.startswith("--in-place=") or re.fullmatch(r"-[^-]*i.*", t) for t in texts
        )
        if not in_place:
            return
        given_script = any(
            t in ("-e", "-f", "--expression", "--file") or t.startswith(("--expression=", "--file="))
            for t in texts
        )
        files = _positionals(args, {"-e", "-f", "--expression", "--file", "-l", "--line-length"})
        for target in files if given_script else files[1:]:
            self._written(target, reading, f"sed -i {target.text}")

    def _git(self, args: list[Word], reading: _Reading) -> None:
        texts = [word.text for word in args]
        position = 0
        while position < len(texts) and texts[position].startswith("-"):
            position += 2 if texts[position] in ("-C", "-c") else 1
        if position >= len(texts):
            return
        verb, rest = texts[position], texts[position + 1 :]
        shown = f"git {verb} {' '.join(rest[:3])}".strip()
        flags = [text for text in rest if text.startswith("-") and not text.startswith("--")]
        if (
            (
                verb == "push"
                and (
                    any(
                        text in ("--force", "--mirror", "--delete", "--force-if-includes", "--prune")
                        for text in rest
                    )
                    or any(text.startswith("--force-with-lease") for text in rest)
                    or any("f" in text or "d" in text for text in flags)
                    or any(text.startswith(("+", ":")) and len(text) > 1 for text in rest)
                )
            )
            or (verb == "reset" and "--hard" in rest)
            or (verb == "clean" and ("--force" in rest or any("f" in text for text in flags)))
            or (
                verb == "branch"
                and (
                    "-D" in rest
                    or (
                        any(t in ("-d", "--delete") for t in rest)
                        and any(t in ("-f", "--force") for t in rest)
                    )
                )
            )
            or verb in ("filter-branch", "filter-repo")
            or (verb == "stash" and rest[:1] in (["clear"], ["drop"]))
            or (verb in ("checkout", "restore") and any(t in (".", "-f", "--force") for t in rest))
        ):
            self._find(reading, "git_force", shown)

    def _cd(self, name: str, args: list[Word], reading: _Reading) -> None:
        targets = [word for word in args if not word.text.startswith("-") or word.text == "-"]
        if name == "popd" or (targets and (targets[0].text == "-" or not targets[0].literal)):
            reading.cwd = None
            return
        if not targets:
            reading.cwd = real(Path("~"))
            return
        place = self._where(targets[0].text, reading)
        reading.cwd = place

    def _network_or_kernel(self, name: str, texts: list[str], reading: _Reading) -> None:
        changes = {
            "sysctl": any(t in ("-w", "--write", "-p", "--load", "--system") or "=" in t for t in texts),
            "hostnamectl": any(t.startswith("set-") for t in texts),
            "timedatectl": any(t.startswith("set-") for t in texts),
            "ip": any(t in ("add", "del", "delete", "flush", "replace", "change") for t in texts)
            or ("set" in texts and any(t in ("down", "up") for t in texts)),
            "ifconfig": any(t in ("down", "up", "netmask", "add", "del") for t in texts),
            "nmcli": any(t in ("down", "delete", "modify", "off", "disconnect") for t in texts),
        }
        if changes[name]:
            self._find(reading, "system", " ".join([name, *texts[:4]]))

    def _packages(self, name: str, texts: list[str], reading: _Reading) -> None:
        verbs = [text for text in texts if not text.startswith("-") or name == "nix-env"]
        key = "pip" if PIP.fullmatch(name) else name
        if key == "uv" and verbs[:2] in (["pip", "install"], ["pip", "uninstall"], ["tool", "install"]):
            self._find(reading, "packages", f"uv {' '.join(verbs[:2])}")
        elif key in PACKAGE_VERBS and (
            set(verbs[:2]) & PACKAGE_VERBS[key] or (key == "nix-env" and set(texts) & PACKAGE_VERBS[key])
        ):
            self._find(reading, "packages", " ".join([name, *verbs[:3]]))
        elif (
            (
                key == "dpkg"
                and any(t in ("-i", "--install", "-r", "--remove", "-P", "--purge") for t in texts)
            )
            or (key == "pacman" and any(re.fullmatch(r"-[SRU][a-zA-Z]*", t) for t in texts))
            or (
                key in NODE_PACKAGERS
                and (
                    any(t in ("-g", "--global", "--location=global") for t in texts)
                    or verbs[:2] == ["global", "add"]
                )
            )
        ):
            self._find(reading, "packages", " ".join([name, *texts[:3]]))

    # --- paths --------------------------------------------------------------------------------------

    def _where(self, text: str, reading: _Reading) -> Path | None:
        """The real place a path names, from the command's folder (None: after an unknown cd)."""
        path = Path(text).expanduser()
        if not path.is_absolute():
            if reading.cwd is None:
                return None
            path = reading.cwd / path
        return real(path)

    def _written(self, target: Word, reading: _Reading, shown: str) -> None:
        """A command writes ``target``: devices, Herald's files and places outside the allowed folders."""
        if not target.literal:
            self._find(reading, "outside_paths", f"writes to a path only known when it runs ({target.text})")
            return
        if target.text.startswith("/dev/"):
            if target.text not in SAFE_DEVICES and not target.text.startswith("/dev/fd/"):
                self._find(reading, "devices", shown)
            return
        place = self._where(target.text, reading)
        if place is None:
            self._find(reading, "outside_paths", f"{shown} (after a cd Herald cannot follow)")
            return
        if self._herald_own(place):
            self._find(reading, "herald_home", shown)
            return
        places = self.places
        if not places.confinement.contains(place) and not any(inside(place, s) for s in places.scratch):
            self._find(reading, "outside_paths", shown)

    def _touched(self, word: Word, reading: _Reading) -> None:
        """Any argument naming a file of Herald's own (``../.env``, ``--config=../config.yaml``)."""
        if not word.literal or self.places.herald_home is None:
            return
        for text in (word.text, word.text.partition("=")[2]):
            if not text or text.startswith("-") or "://" in text:
                continue
            place = self._where(text, reading)
            if place is not None and self._herald_own(place):
                self._find(reading, "herald_home", word.text)
                return

    def _herald_own(self, place: Path) -> bool:
        home = self.places.herald_home
        return (
            home is not None and inside(place, home) and not inside(place, self.places.confinement.workspace)
        )

    def _find(self, reading: _Reading, rule: str, detail: str) -> None:
        reading.findings.append(Finding(rule, f"{LABELS[rule]}: {detail}"))


def _runs_downloaded(texts: Sequence[str]) -> bool:
    """Whether a command line downloads something and also runs a shell, an interpreter or a script."""
    names = [text.split(" ", 1)[0] for text in texts if text]
    runs = any(
        name in SHELLS or INTERPRETER.fullmatch(name) or name in ("source", ".", "chmod") or "." in name
        for name in names
    )
    return runs and any(name in DOWNLOADERS for name in names)


def _options(args: Iterable[Word]) -> list[Word]:
    """The option words before ``--``."""
    found = []
    for word in args:
        if word.text == "--":
            break
        if word.text.startswith("-") and word.text != "-":
            found.append(word)
    return found


def _positionals(args: list[Word], valued: set[str]) -> list[Word]:
    """The words that are not options (nor the values of the options in ``valued``)."""
    found: list[Word] = []
    position = 0
    options_done = False
    while position < len(args):
        word = args[position]
        text = word.text
        if options_done or not text.startswith("-") or text == "-":
            found.append(word)
        elif text == "--":
            options_done = True
        elif text in valued:
            position += 1
        position += 1
    return found


def _after_options(args: list[Word], valued: frozenset[str], *, keep_assignments: bool = True) -> list[Word]:
    """The words after a wrapper's options (and, for ``env``, its NAME=value words)."""
    position = 0
    while position < len(args):
        text = args[position].text
        if text == "--":
            return args[position + 1 :]
        if text in valued:
            position += 2
            continue
        if text.startswith("-") and text != "-":
            position += 1
            continue
        if not keep_assignments and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", text):
            position += 1
            continue
        return args[position:]
    return []


def _option_value(args: list[Word], names: tuple[str, ...]) -> Word | None:
    """The value of the first option among ``names`` (``-c X``, ``-cX`` for one letter, ``--name=X``)."""
    for position, word in enumerate(args):
        text = word.text
        for name in names:
            if text == name and position + 1 < len(args):
                return args[position + 1]
            if name.startswith("--") and text.startswith(name + "="):
                return Word(text[len(name) + 1 :], word.literal)
    return None


def _output_targets(name: str, args: list[Word]) -> list[Word]:
    texts = [word.text for word in args]
    found: list[Word] = []
    if name == "tar":
        extracting = any(t in ("-x", "--extract", "--get") for t in texts) or bool(
            texts and not texts[0].startswith("--") and "x" in texts[0]
        )
        creating = any(t in ("-c", "--create", "-r", "--append", "-u", "--update") for t in texts) or bool(
            texts and not texts[0].startswith("--") and set(texts[0].lstrip("-")) & set("cru")
        )
        if extracting and (folder := _option_value(args, ("-C", "--directory"))) is not None:
            found.append(folder)
        if creating and (archive := _option_value(args, ("-f", "--file"))) is not None:
            found.append(archive)
    elif name == "unzip" and (folder := _option_value(args, ("-d",))) is not None:
        found.append(folder)
    elif name == "curl":
        found += [
            w for w in (_option_value(args, ("-o", "--output")), _option_value(args, ("--output-dir",))) if w
        ]
    elif name == "wget":
        found += [
            w
            for w in (
                _option_value(args, ("-O", "--output-document")),
                _option_value(args, ("-P", "--directory-prefix")),
            )
            if w
        ]
    return [word for word in found if word.text != "-"]


def _remote(text: str) -> bool:
    """``host:path`` (rsync, scp): a place on another machine."""
    colon = text.find(":")
    return colon > 0 and "/" not in text[:colon]
