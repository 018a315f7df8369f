"""Runs many SMTP sessions with Python's smtplib, each doing EHLO, STARTTLS,
EHLO, AUTH LOGIN, one message and QUIT, as a Django or cron sender off the
relay's machine does, and prints JSON: how many sessions ended with each
outcome ("sent", or the reply code or error that stopped one).

Usage: python3 starttls_sessions.py '<json spec>'
spec: host, port, cafile, user, password, sequential (sessions one after
      another), parallel (threads), per_thread (sessions each thread runs in turn)
"""
import collections
import json
import smtplib
import ssl
import sys
import threading
from email.message import EmailMessage

spec = json.loads(sys.argv[1])
context = ssl.create_default_context(cafile=spec["cafile"])
context.check_hostname = False
outcomes = collections.Counter()
lock = threading.Lock()


def session(n):
    msg = EmailMessage()
    msg["From"] = "app@example.test"
    msg["To"] = "ann@example.test"
    msg["Subject"] = f"session {n}"
    msg["Message-ID"] = f"<starttls-{n}@example.test>"
    msg.set_content("hi")
    try:
        with smtplib.SMTP(spec["host"], spec["port"], timeout=20) as smtp:
            smtp.ehlo()
            smtp.starttls(context=context)
            smtp.ehlo()
            smtp.login(spec["user"], spec["password"])
            smtp.send_message(msg)
        outcome = "sent"
    except smtplib.SMTPResponseException as err:
        outcome = str(err.smtp_code)
    except Exception as err:  # a refused or reset connection: the relay's 421 before the greeting, or worse
        outcome = type(err).__name__
    with lock:
        outcomes[outcome] += 1


for n in range(spec.get("sequential", 0)):
    session(n)


def runner(t):
    for i in range(spec.get("per_thread", 0)):
        session(100000 + t * 1000 + i)


threads = [threading.Thread(target=runner, args=(t,)) for t in range(spec.get("parallel", 0))]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(dict(outcomes)))
