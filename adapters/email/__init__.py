"""Email: a mailbox read with IMAP (IDLE, or polling) and answered with SMTP (``adapter``), the
registration the gateway reads (``spec``, ``settings``), the reading of a received mail (``inbound``:
threads, quoting trimmed, HTML to text, automatic mail) and the writing of a reply (``outbound``).
Importing this package does not import aioimaplib or aiosmtplib."""
