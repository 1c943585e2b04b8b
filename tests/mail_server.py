"""A real mail system for the email tests: Debian's Dovecot (IMAP) and Postfix (SMTP) on loopback.

``./scripts/test`` installs ``dovecot-imapd``, ``dovecot-lmtpd`` and ``postfix`` when they are missing.
Everything lives in a temporary directory of its own, removed by :meth:`MailServer.stop`: Dovecot's and
Postfix's configuration, Postfix's queue and every mailbox. Nothing system-wide is touched, no port
below 1024 is used: Dovecot serves IMAP and LMTP on free loopback ports, Postfix takes mail on a free
loopback port and hands every message for ``DOMAIN`` to Dovecot over LMTP (the one delivery path a
real installation uses), so a message sent with SMTP is read back with IMAP, IDLE included.

Mailboxes are a passwd-file (``PASSWORD`` for each, all made at the start), one Maildir each. Postfix
must start as root (it drops to the ``postfix`` user the package creates): without root the servers
cannot run, and the tests say so.
"""

from __future__ import annotations

import atexit
import contextlib
import grp
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from tests.fakes.waiting import wait_until_sync
from tests.postgres import free_port

DOMAIN = "herald.test"
PASSWORD = "secret-for-tests"
START_TIMEOUT = 30.0
MAILBOXES = 400  # made at the start: Dovecot notices a changed user list only after a while
MAIL_USER = "nobody"  # who owns the mailboxes
INSTALL = "sudo apt-get install -y dovecot-imapd dovecot-lmtpd postfix"


class MailMissing(RuntimeError):
    """No Dovecot or Postfix here (or no root to start Postfix); the message says what to do."""


def binaries() -> tuple[str, str]:
    dovecot, postfix = shutil.which("dovecot"), shutil.which("postfix")
    if dovecot is None or postfix is None or not Path("/usr/lib/dovecot/lmtp").exists():
        raise MailMissing(
            f"the email tests need Dovecot and Postfix and they are not installed: run `{INSTALL}` "
            "(./scripts/test does it when run as root)"
        )
    if os.geteuid() != 0:
        raise MailMissing("the email tests start Postfix, which must start as root")
    return dovecot, postfix


DOVECOT_CONF = """\
base_dir = {root}/dovecot-run
state_dir = {root}/dovecot-state
instance_name = herald-test-{imap}
protocols = imap lmtp
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
login_trusted_networks = 127.0.0.0/8
log_path = {root}/dovecot.log
default_internal_user = dovecot
default_login_user = dovenull
first_valid_uid = 0
mail_location = maildir:{root}/mail/%n
mail_uid = {uid}
mail_gid = {gid}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%n {root}/users
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={root}/mail/%n
}}
lmtp_save_to_detail_mailbox = no
protocol lmtp {{
  auth_username_format = %n
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp}
  }}
  unix_listener lmtp {{
    mode = 0600
  }}
}}
service auth {{
  unix_listener auth-userdb {{
    mode = 0600
  }}
  inet_listener {{
    address = 127.0.0.1
    port = {auth}
  }}
}}
service stats {{
  unix_listener stats-reader {{
    mode = 0600
  }}
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
"""

POSTFIX_MAIN = """\
compatibility_level = 3.6
queue_directory = {root}/postfix-queue
data_directory = {root}/postfix-data
mail_owner = postfix
setgid_group = postdrop
myhostname = mail.{domain}
mydomain = {domain}
myorigin = {domain}
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
virtual_mailbox_domains = {domain}
virtual_transport = lmtp:inet:127.0.0.1:{lmtp}
relay_domains =
default_transport = error:the test mail system delivers to {domain} only
smtpd_sasl_auth_enable = yes
smtpd_sasl_type = dovecot
smtpd_sasl_path = inet:127.0.0.1:{auth}
smtpd_recipient_restrictions = permit_mynetworks, permit_sasl_authenticated, reject
smtpd_relay_restrictions = permit_mynetworks, permit_sasl_authenticated, reject
maillog_file_prefixes = {root}
maillog_file = {root}/postfix.log
message_size_limit = 30000000
biff = no
smtputf8_enable = yes
"""

POSTFIX_MASTER = """\
127.0.0.1:{smtp} inet n - n - - smtpd
pickup    unix n - n 60 1 pickup
cleanup   unix n - n - 0 cleanup
qmgr      unix n - n 300 1 qmgr
rewrite   unix - - n - - trivial-rewrite
bounce    unix - - n - 0 bounce
defer     unix - - n - 0 bounce
trace     unix - - n - 0 bounce
verify    unix - - n - 1 verify
flush     unix n - n 1000? 0 flush
proxymap  unix - - n - - proxymap
smtp      unix - - n - - smtp
relay     unix - - n - - smtp
error     unix - - n - - error
retry     unix - - n - - error
discard   unix - - n - - discard
lmtp      unix - - n - - lmtp
anvil     unix - - n - 1 anvil
scache    unix - - n - 1 scache
postlog   unix-dgram n - n - 1 postlogd
showq     unix n - n - - showq
tlsmgr    unix - - n 1000? 1 tlsmgr
"""


class MailServer:
    """Dovecot and Postfix, with :data:`MAILBOXES` mailboxes handed out by :meth:`mailbox`."""

    def __init__(self) -> None:
        self.dovecot, self.postfix = binaries()
        self.root = Path(tempfile.mkdtemp(prefix="herald-mail-"))
        self.imap_port, self.lmtp_port, self.smtp_port = free_port(), free_port(), free_port()
        self.auth_port = free_port()  # Dovecot checks the passwords Postfix's AUTH is given
        self._dovecot: subprocess.Popen[bytes] | None = None
        self._postfix: subprocess.Popen[bytes] | None = None
        self._free = [f"m{number}" for number in range(1, MAILBOXES + 1)]

    def address(self, user: str) -> str:
        return f"{user}@{DOMAIN}"

    def mailbox(self) -> str:
        """The address of a mailbox nobody used yet (its password is ``PASSWORD``)."""
        if not self._free:
            raise RuntimeError(f"the test mail server's {MAILBOXES} mailboxes are used up: make more")
        return self.address(self._free.pop(0))

    def start(self) -> None:
        self.root.chmod(0o755)
        for name in (
            "mail",
            "dovecot-run",
            "dovecot-state",
            "postfix-config",
            "postfix-data",
            "postfix-queue",
        ):
            (self.root / name).mkdir(exist_ok=True)
        (self.root / "users").write_text("".join(f"{name}:{{PLAIN}}{PASSWORD}\n" for name in self._free))
        owner = pwd.getpwnam(MAIL_USER)  # Dovecot keeps no mail as root
        uid, gid = owner.pw_uid, owner.pw_gid
        os.chown(self.root / "mail", uid, gid)
        dovecot_conf = self.root / "dovecot.conf"
        dovecot_conf.write_text(
            DOVECOT_CONF.format(
                root=self.root,
                imap=self.imap_port,
                lmtp=self.lmtp_port,
                auth=self.auth_port,
                uid=uid,
                gid=gid,
            )
        )
        self._dovecot = subprocess.Popen(
            [self.dovecot, "-F", "-c", str(dovecot_conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        wait_until_sync(
            lambda: self._answers(self.imap_port, b"* OK"), START_TIMEOUT, what="Dovecot answering IMAP"
        )
        config = self.root / "postfix-config"
        values = {
            "root": self.root,
            "domain": DOMAIN,
            "lmtp": self.lmtp_port,
            "smtp": self.smtp_port,
            "auth": self.auth_port,
        }
        (config / "main.cf").write_text(POSTFIX_MAIN.format(**values))
        (config / "master.cf").write_text(POSTFIX_MASTER.format(**values))
        postfix_user = pwd.getpwnam("postfix")
        data = self.root / "postfix-data"
        os.chown(data, postfix_user.pw_uid, grp.getgrnam("postfix").gr_gid)
        environ = {**os.environ, "MAIL_CONFIG": str(config)}
        subprocess.run(
            ["/usr/sbin/postfix", "-c", str(config), "set-permissions", "create-missing"],
            env=environ, check=False, capture_output=True, timeout=START_TIMEOUT,
        )  # fmt: skip
        self._postfix = subprocess.Popen(
            [self.postfix, "-c", str(config), "start-fg"],
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_until_sync(
            lambda: self._answers(self.smtp_port, b"220"), START_TIMEOUT, what="Postfix answering SMTP"
        )

    def _answers(self, port: int, greeting: bytes) -> bool:
        for process, name in ((self._dovecot, "Dovecot"), (self._postfix, "Postfix")):
            if process is not None and process.poll() is not None:
                error = process.stderr.read().decode(errors="replace") if process.stderr else ""
                for log in ("dovecot.log", "postfix.log"):
                    with contextlib.suppress(OSError):
                        error += (self.root / log).read_text(errors="replace")[-1000:]
                raise MailMissing(f"{name} did not start: {error.strip()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as probe:
                probe.settimeout(2.0)
                return probe.recv(64).startswith(greeting)
        except OSError:
            return False

    def queue_empty(self) -> bool:
        """Postfix holds no mail: everything it took was delivered to Dovecot (or bounced)."""
        queue = self.root / "postfix-queue"
        return not any(
            files for name in ("maildrop", "incoming", "active", "deferred", "hold")
            for _, _, files in os.walk(queue / name)
        )  # fmt: skip

    def mails(self, address: str) -> list[tuple[bytes, bool]]:
        """Every mail delivered to ``address``, oldest first, each with whether it was flagged ``\\Seen``
        (read from its Maildir: no IMAP login, so waiting on it costs the servers nothing)."""
        maildir = self.root / "mail" / address.split("@")[0]
        found = []
        for folder in ("new", "cur"):
            for path in (maildir / folder).glob("*") if (maildir / folder).is_dir() else ():
                with contextlib.suppress(FileNotFoundError):  # moved from new/ to cur/ meanwhile
                    flags = path.name.rpartition(":2,")[2] if ":2," in path.name else ""
                    found.append((_delivered(path.name), path.read_bytes(), "S" in flags))
        return [(raw, seen) for _, raw, seen in sorted(found, key=lambda item: item[0])]

    def logged_in(self, address: str) -> bool:
        """Someone logged in to ``address``'s mailbox with IMAP since the servers started."""
        with contextlib.suppress(OSError):
            log = (self.root / "dovecot.log").read_text(errors="replace")
            return f"imap-login: Info: Login: user=<{address.split('@')[0]}" in log
        return False

    def stop(self) -> None:
        if self._postfix is not None:
            config = self.root / "postfix-config"
            subprocess.run(
                ["/usr/sbin/postfix", "-c", str(config), "stop"],
                env={**os.environ, "MAIL_CONFIG": str(config)}, check=False, capture_output=True, timeout=30,
            )  # fmt: skip
            _end(self._postfix)
            self._postfix = None
        if self._dovecot is not None:
            _end(self._dovecot)
            self._dovecot = None
        shutil.rmtree(self.root, ignore_errors=True)


def _delivered(name: str) -> tuple[int, int]:
    """When Dovecot delivered a Maildir file, from its name (``<seconds>.M<microseconds>P<pid>.<host>``)."""
    seconds, _, rest = name.partition(".")
    micro = re.match(r"M(\d+)", rest)
    return int(seconds), int(micro.group(1)) if micro else 0


def _end(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


_SHARED: list[MailServer] = []


def shared_mail_server() -> MailServer:
    """The test session's mail servers, started on first use and stopped when the session ends (each
    user of them makes mailboxes of its own). Raises :class:`MailMissing` when they cannot run here."""
    if not _SHARED:
        server = MailServer()
        try:
            server.start()
        except BaseException:
            server.stop()
            raise
        atexit.register(server.stop)
        _SHARED.append(server)
    return _SHARED[0]
